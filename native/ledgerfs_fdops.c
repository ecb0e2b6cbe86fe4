/*
 * Small helpers on file descriptors that Node's fs lacks: fallocate(2), lseek(2) with
 * SEEK_DATA/SEEK_HOLE and FIEMAP past the end (synchronous: quick syscalls, like the local
 * backend's other calls) and
 * copy_file_range(2) (on libuv's thread pool, a promise), and a new small file created, written
 * and closed, several in one thread-pool job (writeNewFiles); and crc32c, GCS's upload checksum. The local backend (src/backend/fd-ops.ts)
 * uses them on its own backing fds to serve the FUSE ops of the same names. No libfuse: a
 * separate addon, so the backend never loads a FUSE binding. Failures throw (reject) an Error
 * whose `code` is the errno name (ENOSPC, EOPNOTSUPP, ENXIO, EXDEV...), as Node's fs does.
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
#include <unistd.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

/* Throw the errno `err` as a JS error whose code is its name (EPERM, ...): the local-store addon's
 * one way to fail (ledgerfs_xattr.c uses it too). */
napi_value ledgerfs_throw_errno(napi_env env, const char *what, int err) {
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
  if (fallocate((int)a[0], (int)a[1], (off_t)a[2], (off_t)a[3]) != 0) return ledgerfs_throw_errno(env, "fallocate", errno);
  return NULL;
}

/* copyFileRange(fdIn, offIn, fdOut, offOut, length) -> Promise of the bytes copied (short only
 * at the source's end: the kernel's own short counts are retried). On libuv's thread pool: a
 * copy of megabytes takes long enough to hold up every other request on the JS thread. */
struct copy_job {
  napi_async_work work;
  napi_deferred deferred;
  int fd_in, fd_out;
  off_t in, out;
  size_t left, done;
  int err;
};

static void copy_execute(napi_env env, void *data) {
  struct copy_job *j = data;
  while (j->left > 0) {
    ssize_t n = copy_file_range(j->fd_in, &j->in, j->fd_out, &j->out, j->left, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (j->done == 0) j->err = errno; /* else: report what was copied; the caller asks again */
      break;
    }
    if (n == 0) break;
    j->done += (size_t)n;
    j->left -= (size_t)n;
  }
}

static void copy_complete(napi_env env, napi_status status, void *data) {
  struct copy_job *j = data;
  napi_value v;
  if (status != napi_ok && !j->err) j->err = EIO;
  if (j->err) {
    char msg[256];
    const char *name = strerrorname_np(j->err);
    napi_value code, text;
    snprintf(msg, sizeof msg, "copy_file_range: %s", strerror(j->err));
    napi_create_string_utf8(env, name ? name : "EIO", NAPI_AUTO_LENGTH, &code);
    napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &text);
    napi_create_error(env, code, text, &v);
    napi_reject_deferred(env, j->deferred, v);
  } else {
    napi_create_double(env, (double)j->done, &v);
    napi_resolve_deferred(env, j->deferred, v);
  }
  napi_delete_async_work(env, j->work);
  free(j);
}

static napi_value js_copy_file_range(napi_env env, napi_callback_info info) {
  double a[5];
  if (!nums(env, info, 5, a)) return NULL;
  struct copy_job *j = calloc(1, sizeof *j);
  if (!j) return ledgerfs_throw_errno(env, "copy_file_range", ENOMEM);
  j->fd_in = (int)a[0]; j->in = (off_t)a[1]; j->fd_out = (int)a[2]; j->out = (off_t)a[3]; j->left = (size_t)a[4];
  napi_value promise, name;
  napi_create_string_utf8(env, "ledgerfs:copy_file_range", NAPI_AUTO_LENGTH, &name);
  if (napi_create_promise(env, &j->deferred, &promise) != napi_ok ||
      napi_create_async_work(env, NULL, name, copy_execute, copy_complete, j, &j->work) != napi_ok ||
      napi_queue_async_work(env, j->work) != napi_ok) {
    free(j);
    return ledgerfs_throw_errno(env, "copy_file_range", EIO);
  }
  return promise;
}

/* writeNewFiles(paths, buffers, mode) -> a promise of an array of errno numbers (0: written):
 * each file created (O_EXCL), its buffer written whole, closed, all in one job on libuv's thread
 * pool. Node's fs needs three jobs per file (open, write, close), and on a busy host each job's
 * wake-ups of a pool thread and of the event loop cost more than a small file's syscalls (the
 * GCS content cache keeps the uploads that landed within a few milliseconds of each other this
 * way). A failed write removes what it made. */
struct new_files_job {
  napi_async_work work;
  napi_deferred deferred;
  napi_ref buffers_ref;
  size_t count;
  mode_t mode;
  struct { char *path; const char *data; size_t length; int err; } *files;
};

static int write_new_file(const char *path, const char *data, size_t length, mode_t mode) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return errno;
  int err = 0;
  size_t done = 0;
  while (done < length) {
    ssize_t n = write(fd, data + done, length - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      err = errno;
      break;
    }
    done += (size_t)n;
  }
  if (close(fd) != 0 && !err && errno != EINTR) err = errno;
  if (err) unlink(path);
  return err;
}

static void new_files_execute(napi_env env, void *data) {
  struct new_files_job *j = data;
  for (size_t k = 0; k < j->count; k++) j->files[k].err = write_new_file(j->files[k].path, j->files[k].data, j->files[k].length, j->mode);
}

static void new_files_free(napi_env env, struct new_files_job *j) {
  for (size_t k = 0; k < j->count; k++) free(j->files[k].path);
  free(j->files);
  if (j->buffers_ref) napi_delete_reference(env, j->buffers_ref);
  free(j);
}

static void new_files_complete(napi_env env, napi_status status, void *data) {
  struct new_files_job *j = data;
  napi_value out, v;
  napi_create_array_with_length(env, j->count, &out);
  for (size_t k = 0; k < j->count; k++) {
    napi_create_int32(env, status == napi_ok ? j->files[k].err : EIO, &v);
    napi_set_element(env, out, (uint32_t)k, v);
  }
  napi_resolve_deferred(env, j->deferred, out);
  napi_delete_async_work(env, j->work);
  new_files_free(env, j);
}

static napi_value js_write_new_files(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  size_t argc = 3;
  bool paths_ok = false, buffers_ok = false;
  uint32_t n = 0, nb = 0;
  double mode = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 3 ||
      napi_is_array(env, argv[0], &paths_ok) != napi_ok || !paths_ok ||
      napi_is_array(env, argv[1], &buffers_ok) != napi_ok || !buffers_ok ||
      napi_get_array_length(env, argv[0], &n) != napi_ok || napi_get_array_length(env, argv[1], &nb) != napi_ok || n != nb ||
      napi_get_value_double(env, argv[2], &mode) != napi_ok) {
    napi_throw_type_error(env, NULL, "writeNewFiles(paths: string[], data: Buffer[], mode: number)");
    return NULL;
  }
  struct new_files_job *j = calloc(1, sizeof *j);
  if (!j || !(j->files = calloc(n ? n : 1, sizeof *j->files))) {
    free(j);
    return ledgerfs_throw_errno(env, "writeNewFiles", ENOMEM);
  }
  j->mode = (mode_t)mode;
  for (uint32_t k = 0; k < n; k++) {
    napi_value p, b;
    size_t len = 0;
    bool is_buffer = false;
    void *bytes = NULL;
    if (napi_get_element(env, argv[0], k, &p) != napi_ok || napi_get_value_string_utf8(env, p, NULL, 0, &len) != napi_ok ||
        napi_get_element(env, argv[1], k, &b) != napi_ok || napi_is_buffer(env, b, &is_buffer) != napi_ok || !is_buffer) {
      new_files_free(env, j);
      napi_throw_type_error(env, NULL, "writeNewFiles(paths: string[], data: Buffer[], mode: number)");
      return NULL;
    }
    j->count = k + 1;
    if (!(j->files[k].path = malloc(len + 1))) {
      new_files_free(env, j);
      return ledgerfs_throw_errno(env, "writeNewFiles", ENOMEM);
    }
    napi_get_value_string_utf8(env, p, j->files[k].path, len + 1, &len);
    napi_get_buffer_info(env, b, &bytes, &j->files[k].length);
    j->files[k].data = bytes;
  }
  j->count = n;
  napi_value promise, name;
  napi_create_string_utf8(env, "ledgerfs:writeNewFiles", NAPI_AUTO_LENGTH, &name);
  /* the array keeps its buffers alive until the job is done */
  if (napi_create_reference(env, argv[1], 1, &j->buffers_ref) != napi_ok ||
      napi_create_promise(env, &j->deferred, &promise) != napi_ok ||
      napi_create_async_work(env, NULL, name, new_files_execute, new_files_complete, j, &j->work) != napi_ok ||
      napi_queue_async_work(env, j->work) != napi_ok) {
    new_files_free(env, j);
    return ledgerfs_throw_errno(env, "writeNewFiles", EIO);
  }
  return promise;
}

/* seek(fd, offset, whence) -> the offset lseek(2) answers (SEEK_DATA = 3, SEEK_HOLE = 4) */
static napi_value js_seek(napi_env env, napi_callback_info info) {
  double a[3];
  if (!nums(env, info, 3, a)) return NULL;
  off_t r = lseek((int)a[0], (off_t)a[1], (int)a[2]);
  if (r < 0) return ledgerfs_throw_errno(env, "lseek", errno);
  napi_value v;
  napi_create_double(env, (double)r, &v);
  return v;
}

/* allocatedEnd(fd, from) -> the end of the last extent allocated at or past `from` (the file's
 * size: blocks fallocate KEEP_SIZE reserved past the end), or `from` when there is none; FIEMAP,
 * so the answer is the file system's own. Throws EOPNOTSUPP where FIEMAP is not served (tmpfs). */
#define EXTENTS 32
static napi_value js_allocated_end(napi_env env, napi_callback_info info) {
  double a[2];
  if (!nums(env, info, 2, a)) return NULL;
  int fd = (int)a[0];
  __u64 from = (__u64)a[1], end = from, at = from;
  char buf[sizeof(struct fiemap) + EXTENTS * sizeof(struct fiemap_extent)];
  struct fiemap *fm = (struct fiemap *)buf;
  for (;;) {
    memset(buf, 0, sizeof buf);
    fm->fm_start = at;
    fm->fm_length = FIEMAP_MAX_OFFSET - at;
    fm->fm_extent_count = EXTENTS;
    if (ioctl(fd, FS_IOC_FIEMAP, fm) != 0) return ledgerfs_throw_errno(env, "fiemap", errno == ENOTTY ? EOPNOTSUPP : errno);
    if (fm->fm_mapped_extents == 0) break;
    bool last = false;
    for (__u32 k = 0; k < fm->fm_mapped_extents; k++) {
      struct fiemap_extent *e = &fm->fm_extents[k];
      if (e->fe_logical + e->fe_length > end) end = e->fe_logical + e->fe_length;
      if (e->fe_flags & FIEMAP_EXTENT_LAST) last = true;
    }
    struct fiemap_extent *tail = &fm->fm_extents[fm->fm_mapped_extents - 1];
    if (last || fm->fm_mapped_extents < EXTENTS || tail->fe_logical + tail->fe_length <= at) break;
    at = tail->fe_logical + tail->fe_length;
  }
  napi_value v;
  napi_create_double(env, (double)end, &v);
  return v;
}

/* crc32c(buffer) -> the CRC-32C (Castagnoli) of the bytes, as an unsigned 32-bit number: the
 * checksum GCS verifies on every upload. With SSE4.2 (every x86-64 since 2008) the CPU's crc32
 * instruction, 8 bytes a step; otherwise a table, a byte a step. The JS implementation it
 * replaces cost about 25 us per 4 KiB object on the event loop. */
static uint32_t crc_table[256];
static bool crc_sse42;

static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    crc_table[i] = c;
  }
#if defined(__x86_64__)
  __builtin_cpu_init();
  crc_sse42 = __builtin_cpu_supports("sse4.2");
#endif
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t c, const uint8_t *p, size_t n) {
  uint64_t c64 = c;
  while (n && ((uintptr_t)p & 7)) { c64 = __builtin_ia32_crc32qi((uint32_t)c64, *p++); n--; }
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    c64 = __builtin_ia32_crc32di(c64, w);
    p += 8;
    n -= 8;
  }
  while (n--) c64 = __builtin_ia32_crc32qi((uint32_t)c64, *p++);
  return (uint32_t)c64;
}
#endif

static uint32_t crc32c_of(const uint8_t *p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
#if defined(__x86_64__)
  if (crc_sse42) return crc_hw(c, p, n) ^ 0xFFFFFFFFu;
#endif
  while (n--) c = crc_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

static napi_value js_crc32c(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  size_t argc = 1;
  bool is_buffer = false;
  void *bytes = NULL;
  size_t length = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
      napi_is_buffer(env, argv[0], &is_buffer) != napi_ok || !is_buffer ||
      napi_get_buffer_info(env, argv[0], &bytes, &length) != napi_ok) {
    napi_throw_type_error(env, NULL, "crc32c(data: Buffer)");
    return NULL;
  }
  napi_value v;
  napi_create_uint32(env, crc32c_of(bytes, length), &v);
  return v;
}

/* the fd functions of the local-store addon (ledgerfs_local.c) */
void ledgerfs_fdops_register(napi_env env, napi_value exports) {
  crc_init();
  napi_property_descriptor props[] = {
    {"fallocate", NULL, js_fallocate, NULL, NULL, NULL, napi_default, NULL},
    {"copyFileRange", NULL, js_copy_file_range, NULL, NULL, NULL, napi_default, NULL},
    {"seek", NULL, js_seek, NULL, NULL, NULL, napi_default, NULL},
    {"allocatedEnd", NULL, js_allocated_end, NULL, NULL, NULL, napi_default, NULL},
    {"writeNewFiles", NULL, js_write_new_files, NULL, NULL, NULL, napi_default, NULL},
    {"crc32c", NULL, js_crc32c, NULL, NULL, NULL, napi_default, NULL},
  };
  napi_define_properties(env, exports, sizeof props / sizeof *props, props);
}
