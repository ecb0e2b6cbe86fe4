/*
 * Small synchronous helpers on file descriptors that Node's fs lacks: fallocate(2),
 * copy_file_range(2) and lseek(2) with SEEK_DATA/SEEK_HOLE. The local backend
 * (src/backend/fd-ops.ts) uses them on its own backing fds to serve the FUSE ops of the same
 * names. No libfuse: a separate addon, so the backend never loads a FUSE binding. Failures throw
 * an Error whose `code` is the errno name (ENOSPC, EOPNOTSUPP, ENXIO, EXDEV...), as Node's fs does.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <node_api.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static napi_value fail(napi_env env, const char *what, int err) {
  char msg[256];
  const char *name = strerrorname_np(err);
  snprintf(msg, sizeof msg, "%s: %s", what, strerror(err));
  napi_throw_error(env, name ? name : "EIO", msg);
  return NULL;
}

/* n numeric arguments as doubles; false with an exception pending when one is missing */
static bool nums(napi_env env, napi_callback_info info, size_t n, double *out) {
  napi_value argv[8];
  size_t argc = 8;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < n) {
    napi_throw_type_error(env, NULL, "ledgerfs_fdops: missing arguments");
    return false;
  }
  for (size_t k = 0; k < n; k++) {
    if (napi_get_value_double(env, argv[k], &out[k]) != napi_ok) {
      napi_throw_type_error(env, NULL, "ledgerfs_fdops: arguments must be numbers");
      return false;
    }
  }
  return true;
}

/* fallocate(fd, mode, offset, length) */
static napi_value js_fallocate(napi_env env, napi_callback_info info) {
  double a[4];
  if (!nums(env, info, 4, a)) return NULL;
  if (fallocate((int)a[0], (int)a[1], (off_t)a[2], (off_t)a[3]) != 0) return fail(env, "fallocate", errno);
  return NULL;
}

/* copyFileRange(fdIn, offIn, fdOut, offOut, length) -> bytes copied (short only at the source's
 * end: the kernel's own short counts are retried) */
static napi_value js_copy_file_range(napi_env env, napi_callback_info info) {
  double a[5];
  if (!nums(env, info, 5, a)) return NULL;
  off_t in = (off_t)a[1], out = (off_t)a[3];
  size_t left = (size_t)a[4], done = 0;
  while (left > 0) {
    ssize_t n = copy_file_range((int)a[0], &in, (int)a[2], &out, left, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (done > 0) break; /* report what was copied; the caller asks again for the rest */
      return fail(env, "copy_file_range", errno);
    }
    if (n == 0) break;
    done += (size_t)n;
    left -= (size_t)n;
  }
  napi_value r;
  napi_create_double(env, (double)done, &r);
  return r;
}

/* seek(fd, offset, whence) -> the offset lseek(2) answers (SEEK_DATA = 3, SEEK_HOLE = 4) */
static napi_value js_seek(napi_env env, napi_callback_info info) {
  double a[3];
  if (!nums(env, info, 3, a)) return NULL;
  off_t r = lseek((int)a[0], (off_t)a[1], (int)a[2]);
  if (r < 0) return fail(env, "lseek", errno);
  napi_value v;
  napi_create_double(env, (double)r, &v);
  return v;
}

static napi_value init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
    {"fallocate", NULL, js_fallocate, NULL, NULL, NULL, napi_default, NULL},
    {"copyFileRange", NULL, js_copy_file_range, NULL, NULL, NULL, napi_default, NULL},
    {"seek", NULL, js_seek, NULL, NULL, NULL, napi_default, NULL},
  };
  napi_define_properties(env, exports, sizeof props / sizeof *props, props);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
