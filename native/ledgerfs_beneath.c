/*
 * Path resolution that cannot leave a directory, for the local backend (src/backend/beneath.ts):
 * openat2(2) with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS from a descriptor of the backend root.
 * The kernel refuses a symlink (or '..' escape) in any component, so a backend path is resolved
 * in one syscall instead of realpath(3)'s readlink per host path component, and for stat and
 * open the resolution is the use: no window between check and use. No libfuse here: the local backend uses this whatever binding serves the mount, and
 * falls back to its realpath check when this addon is not built or the kernel lacks openat2.
 *
 * stat and open resolve the whole path in one openat2 (the parent's check costs a second call
 * only when that one fails with ELOOP); check verifies a parent for the path-based ops (mkdir,
 * unlink, rename, ...), which keep the old check-then-use window.
 * Every call takes (rootFd, parent, name): parent is the backend path of the parent without its
 * leading '/' ("" for the root itself), name one component. Results: >= 0 success (a descriptor
 * for open), -errno when the final operation failed, -(PARENT + errno) when the parent did not
 * resolve (ELOOP there: a symlink; ENOENT/ENOTDIR: missing).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <node_api.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ADDON_NAME "ledgerfs_local"
#include "ledgerfs_napi.h"
#include "ledgerfs_names.h"

#define PARENT 4096
#define PATH_BYTES 4096
#define NAME_BYTES 257 /* NAME_MAX + 1 + one more to see a longer name */

/* stat record shared with JS: 7 doubles (mode size nlink uid gid ino blocks), the 3 times'
 * int64 seconds, rdev as a double (at byte 80), then the times' int32 nanoseconds at byte 88
 * (a nanosecond count in 64 bits ends in 2262) */
#define REC_BYTES 104
static char *rec;
static napi_ref rec_ref;

static int open_parent(int root, const char *parent) {
  if (!parent[0]) return root;
  struct open_how how;
  memset(&how, 0, sizeof how);
  how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS;
  int fd;
  do fd = (int)syscall(SYS_openat2, root, parent, &how, sizeof how);
  while (fd < 0 && errno == EAGAIN); /* RESOLVE_* lookups may ask to retry on a rename race */
  return fd < 0 ? -(PARENT + errno) : fd;
}
static void close_parent(int root, int fd) {
  if (fd != root) close(fd);
}

/*
 * The node itself in one openat2 (never following it: O_NOFOLLOW; O_PATH gives a descriptor of
 * a final symlink itself). Only when that fails with ELOOP, which a symlinked parent and (without
 * O_PATH) a final symlink both give, does a second call tell them apart.
 */
static int open_node(int root, const char *parent, const char *name, int flags, mode_t mode) {
  char full[PATH_BYTES + NAME_BYTES];
  const char *path = name;
  if (parent[0]) {
    snprintf(full, sizeof full, "%s/%s", parent, name);
    path = full;
  }
  struct open_how how;
  memset(&how, 0, sizeof how);
  how.flags = (uint64_t)(flags | O_NOFOLLOW | O_CLOEXEC);
  if (flags & O_CREAT) how.mode = mode; /* openat2 refuses a mode without O_CREAT */
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS;
  int fd;
  do fd = (int)syscall(SYS_openat2, root, path, &how, sizeof how);
  while (fd < 0 && errno == EAGAIN);
  if (fd >= 0) return fd;
  int err = errno;
  if (err == EXDEV || (err == ELOOP && (flags & O_PATH))) return -(PARENT + err);
  if (err == ELOOP) {
    int p = open_parent(root, parent);
    if (p < 0) return p;
    close_parent(root, p);
  }
  return -err;
}

/* read (rootFd, parent, name[, a, b]) into ints and two strings: 0, or the errno to answer */
static int args(napi_env env, napi_callback_info info, size_t want, int32_t *ints, char *parent, char *name) {
  napi_value argv[5];
  size_t argc = 5, len;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < want) return EINVAL;
  if (napi_get_value_int32(env, argv[0], &ints[0]) != napi_ok) return EINVAL;
  /* names are bytes; strings carry the bytes that are not UTF-8 as escapes (ledgerfs_names.h) */
  if (name_from_js(env, argv[1], parent, PATH_BYTES, &len) != napi_ok) return EINVAL;
  if (len >= PATH_BYTES - 1) return ENAMETOOLONG;
  if (name) {
    if (name_from_js(env, argv[2], name, NAME_BYTES, &len) != napi_ok) return EINVAL;
    if (len >= NAME_BYTES - 1) return ENAMETOOLONG;
  }
  for (size_t k = 3; k < want; k++)
    if (napi_get_value_int32(env, argv[k], &ints[k - 2]) != napi_ok) return EINVAL;
  return 0;
}

static napi_value result(napi_env env, int32_t r) {
  napi_value v;
  napi_create_int32(env, r, &v);
  return v;
}

/* check(rootFd, parent): the parent resolves beneath the root without a symlink */
static napi_value js_check(napi_env env, napi_callback_info info) {
  int32_t ints[1];
  char parent[PATH_BYTES];
  int e = args(env, info, 2, ints, parent, NULL);
  if (e) return result(env, -e);
  int p = open_parent(ints[0], parent);
  if (p < 0) return result(env, p);
  close_parent(ints[0], p);
  return result(env, 0);
}

/* a stat into the record lstat and fstat share with JS (REC_BYTES) */
static void put_record(const struct stat *st) {
  double *f = (double *)rec;
  f[0] = st->st_mode; f[1] = (double)st->st_size; f[2] = (double)st->st_nlink; f[3] = st->st_uid;
  f[4] = st->st_gid; f[5] = (double)st->st_ino; f[6] = (double)st->st_blocks;
  int64_t *t = (int64_t *)rec + 7;
  int32_t *ns = (int32_t *)(rec + 88);
  t[0] = (int64_t)st->st_atim.tv_sec; ns[0] = (int32_t)st->st_atim.tv_nsec;
  t[1] = (int64_t)st->st_mtim.tv_sec; ns[1] = (int32_t)st->st_mtim.tv_nsec;
  t[2] = (int64_t)st->st_ctim.tv_sec; ns[2] = (int32_t)st->st_ctim.tv_nsec;
  ((double *)rec)[10] = (double)st->st_rdev;
}

/* lstat(rootFd, parent, name): the node itself (never followed) into the record */
static napi_value js_lstat(napi_env env, napi_callback_info info) {
  int32_t ints[1];
  char parent[PATH_BYTES], name[NAME_BYTES];
  int e = rec ? args(env, info, 3, ints, parent, name) : EINVAL;
  if (e) return result(env, -e);
  struct stat st;
  int r;
  if (!parent[0]) {
    r = fstatat(ints[0], name, &st, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : -errno;
  } else {
    /* a miss (every lookup before a create) is this one call */
    int fd = open_node(ints[0], parent, name, O_PATH, 0);
    if (fd < 0) return result(env, fd);
    r = fstat(fd, &st) == 0 ? 0 : -errno;
    close(fd);
  }
  if (r) return result(env, r);
  put_record(&st);
  return result(env, 0);
}

/* fstat(fd): an open file's node into the record (as lstat fills it): 0, or -errno */
static napi_value js_fstat(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  size_t argc = 1;
  int32_t fd;
  if (!rec || napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
      napi_get_value_int32(env, argv[0], &fd) != napi_ok) return result(env, -EINVAL);
  struct stat st;
  if (fstat(fd, &st) != 0) return result(env, -errno);
  put_record(&st);
  return result(env, 0);
}

/* open(rootFd, parent, name, flags, mode): a descriptor; O_NOFOLLOW and O_CLOEXEC always added */
static napi_value js_open(napi_env env, napi_callback_info info) {
  int32_t ints[3];
  char parent[PATH_BYTES], name[NAME_BYTES];
  int e = args(env, info, 5, ints, parent, name);
  if (e) return result(env, -e);
  return result(env, open_node(ints[0], parent, name, ints[1], (mode_t)ints[2]));
}

/* mknod(rootFd, parent, name, mode, dev): mknodat in the verified parent (the daemon's umask
 * applies; the caller sets the exact mode after) */
static napi_value js_mknod(napi_env env, napi_callback_info info) {
  int32_t ints[3];
  char parent[PATH_BYTES], name[NAME_BYTES];
  int e = args(env, info, 5, ints, parent, name);
  if (e) return result(env, -e);
  int p = open_parent(ints[0], parent);
  if (p < 0) return result(env, p);
  int r = mknodat(p, name, (mode_t)ints[1], (dev_t)(uint32_t)ints[2]) == 0 ? 0 : -errno;
  close_parent(ints[0], p);
  return result(env, r);
}

/* setRecord(arrayBuffer): where lstat writes (at least REC_BYTES) */
static napi_value js_set_record(napi_env env, napi_callback_info info) {
  char *data = keep_scratch(env, info, REC_BYTES, &rec_ref, "setRecord");
  if (data) rec = data;
  return NULL;
}

/* the beneath* functions of the local-store addon (ledgerfs_local.c) */
void ledgerfs_beneath_register(napi_env env, napi_value exports) {
  napi_property_descriptor d[] = {
    {"check", NULL, js_check, NULL, NULL, NULL, napi_default, NULL},
    {"lstat", NULL, js_lstat, NULL, NULL, NULL, napi_default, NULL},
    {"fstat", NULL, js_fstat, NULL, NULL, NULL, napi_default, NULL},
    {"open", NULL, js_open, NULL, NULL, NULL, napi_default, NULL},
    {"mknod", NULL, js_mknod, NULL, NULL, NULL, napi_default, NULL},
    {"setRecord", NULL, js_set_record, NULL, NULL, NULL, napi_default, NULL},
  };
  napi_value parent_bit;
  napi_create_int32(env, PARENT, &parent_bit);
  napi_define_properties(env, exports, sizeof d / sizeof d[0], d);
  napi_set_named_property(env, exports, "PARENT", parent_bit);
}
