/*
 * Extended attributes and exact times for the local backend (src/backend/node-ops.ts), on a
 * node the backend has already resolved beneath its root: an O_PATH descriptor (opened without
 * following the last component). The kernel refuses fgetxattr/fsetxattr/futimens on an O_PATH
 * descriptor, so each call goes through /proc/self/fd/N, which names exactly that node (a
 * symlink itself, never its target) without resolving the path again. No libfuse: this is
 * part of the ledgerfs_local addon. Failures throw an Error whose `code` is the errno name.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <node_api.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <linux/limits.h> /* XATTR_NAME_MAX */
#include "ledgerfs_names.h"

#define ATTR_NAME_BYTES (XATTR_NAME_MAX + 2) /* one more to see a longer name */

napi_value ledgerfs_throw_errno(napi_env env, const char *what, int err); /* ledgerfs_fdops.c */

static void proc_path(char *buf, size_t len, int32_t fd) { snprintf(buf, len, "/proc/self/fd/%d", fd); }

/* (fd[, name]) from argv; false with an exception pending */
static bool fd_and_name(napi_env env, napi_value *argv, size_t argc, size_t want, int32_t *fd, char *name) {
  if (argc < want || napi_get_value_int32(env, argv[0], fd) != napi_ok) {
    napi_throw_type_error(env, NULL, "ledgerfs_xattr: (fd, ...) expected");
    return false;
  }
  if (!name) return true;
  size_t len = 0;
  /* attribute names are bytes too (ledgerfs_names.h) */
  if (name_from_js(env, argv[1], name, ATTR_NAME_BYTES, &len) != napi_ok) {
    napi_throw_type_error(env, NULL, "ledgerfs_xattr: the attribute name must be a string");
    return false;
  }
  if (len > XATTR_NAME_MAX) { ledgerfs_throw_errno(env, "xattr", ERANGE); return false; }
  return true;
}

/* getxattr(fd, name) -> Buffer */
static napi_value js_getxattr(napi_env env, napi_callback_info info) {
  napi_value argv[2];
  size_t argc = 2;
  int32_t fd;
  char name[ATTR_NAME_BYTES], p[40];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (!fd_and_name(env, argv, argc, 2, &fd, name)) return NULL;
  proc_path(p, sizeof p, fd);
  for (;;) {
    ssize_t n = getxattr(p, name, NULL, 0);
    if (n < 0) return ledgerfs_throw_errno(env, "getxattr", errno);
    void *data;
    napi_value buf;
    if (napi_create_buffer(env, (size_t)n, &data, &buf) != napi_ok) return ledgerfs_throw_errno(env, "getxattr", ENOMEM);
    ssize_t got = n ? getxattr(p, name, data, (size_t)n) : 0;
    if (got == n) return buf;
    if (got < 0 && errno != ERANGE) return ledgerfs_throw_errno(env, "getxattr", errno);
    /* it changed size between the two calls: ask again */
  }
}

/* listxattr(fd) -> Buffer of NUL-terminated names */
static napi_value js_listxattr(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  size_t argc = 1;
  int32_t fd;
  char p[40];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (!fd_and_name(env, argv, argc, 1, &fd, NULL)) return NULL;
  proc_path(p, sizeof p, fd);
  for (;;) {
    ssize_t n = listxattr(p, NULL, 0);
    if (n < 0) return ledgerfs_throw_errno(env, "listxattr", errno);
    void *data;
    napi_value buf;
    if (napi_create_buffer(env, (size_t)n, &data, &buf) != napi_ok) return ledgerfs_throw_errno(env, "listxattr", ENOMEM);
    ssize_t got = n ? listxattr(p, data, (size_t)n) : 0;
    if (got == n) return buf;
    if (got >= 0 && got < n) {
      napi_value short_buf;
      void *copy;
      if (napi_create_buffer_copy(env, (size_t)got, data, &copy, &short_buf) != napi_ok) return ledgerfs_throw_errno(env, "listxattr", ENOMEM);
      return short_buf;
    }
    if (errno != ERANGE) return ledgerfs_throw_errno(env, "listxattr", errno);
  }
}

/* setxattr(fd, name, value: Buffer, flags) */
static napi_value js_setxattr(napi_env env, napi_callback_info info) {
  napi_value argv[4];
  size_t argc = 4;
  int32_t fd, flags = 0;
  char name[ATTR_NAME_BYTES], p[40];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (!fd_and_name(env, argv, argc, 4, &fd, name)) return NULL;
  void *data = NULL;
  size_t len = 0;
  if (napi_get_buffer_info(env, argv[2], &data, &len) != napi_ok || napi_get_value_int32(env, argv[3], &flags) != napi_ok) {
    napi_throw_type_error(env, NULL, "ledgerfs_xattr: setxattr(fd, name, buffer, flags)");
    return NULL;
  }
  proc_path(p, sizeof p, fd);
  if (setxattr(p, name, len ? data : "", len, flags) != 0) return ledgerfs_throw_errno(env, "setxattr", errno);
  return NULL;
}

/* removexattr(fd, name) */
static napi_value js_removexattr(napi_env env, napi_callback_info info) {
  napi_value argv[2];
  size_t argc = 2;
  int32_t fd;
  char name[ATTR_NAME_BYTES], p[40];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (!fd_and_name(env, argv, argc, 2, &fd, name)) return NULL;
  proc_path(p, sizeof p, fd);
  if (removexattr(p, name) != 0) return ledgerfs_throw_errno(env, "removexattr", errno);
  return NULL;
}

/*
 * utimens(fd, atimeSec: bigint, atimeNsec, mtimeSec: bigint, mtimeNsec): utimensat(2) with
 * timespecs, so a time is kept to the nanosecond and anywhere in a signed 64-bit second range
 * (Node's utimes takes seconds as a double). nsec may be UTIME_NOW or UTIME_OMIT.
 */
static napi_value js_utimens(napi_env env, napi_callback_info info) {
  napi_value argv[5];
  size_t argc = 5;
  int32_t fd, ans, mns;
  int64_t as, ms;
  bool lossless;
  char p[40];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 5 || napi_get_value_int32(env, argv[0], &fd) != napi_ok ||
      napi_get_value_bigint_int64(env, argv[1], &as, &lossless) != napi_ok || !lossless ||
      napi_get_value_int32(env, argv[2], &ans) != napi_ok ||
      napi_get_value_bigint_int64(env, argv[3], &ms, &lossless) != napi_ok || !lossless ||
      napi_get_value_int32(env, argv[4], &mns) != napi_ok) {
    napi_throw_type_error(env, NULL, "ledgerfs_xattr: utimens(fd, atimeSec: bigint, atimeNsec, mtimeSec: bigint, mtimeNsec)");
    return NULL;
  }
  struct timespec ts[2] = {{.tv_sec = as, .tv_nsec = ans}, {.tv_sec = ms, .tv_nsec = mns}};
  proc_path(p, sizeof p, fd);
  if (utimensat(AT_FDCWD, p, ts, 0) != 0) return ledgerfs_throw_errno(env, "utimensat", errno);
  return NULL;
}

/* the node ops of the local-store addon (ledgerfs_local.c) */
void ledgerfs_xattr_register(napi_env env, napi_value exports) {
  napi_property_descriptor d[] = {
    {"getxattr", NULL, js_getxattr, NULL, NULL, NULL, napi_default, NULL},
    {"listxattr", NULL, js_listxattr, NULL, NULL, NULL, napi_default, NULL},
    {"setxattr", NULL, js_setxattr, NULL, NULL, NULL, napi_default, NULL},
    {"removexattr", NULL, js_removexattr, NULL, NULL, NULL, napi_default, NULL},
    {"utimens", NULL, js_utimens, NULL, NULL, NULL, napi_default, NULL},
  };
  napi_define_properties(env, exports, sizeof d / sizeof d[0], d);
}
