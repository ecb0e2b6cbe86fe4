/*
 * The libfuse3 addon's (ledgerfs_fuse3_ll.c) helpers beyond ledgerfs_napi.h: option reading,
 * the mount option string, attribute records and the detaching of Buffers over native memory.
 */
#ifndef LEDGERFS_COMMON_H
#define LEDGERFS_COMMON_H
#include <math.h>
#include <node_api.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "ledgerfs_napi.h"

static bool get_prop(napi_env env, napi_value obj, const char *key, napi_value *out) {
  bool has = false;
  if (napi_has_named_property(env, obj, key, &has) != napi_ok || !has) return false;
  napi_get_named_property(env, obj, key, out);
  napi_valuetype t;
  napi_typeof(env, *out, &t);
  return t != napi_undefined && t != napi_null;
}
static double get_num(napi_env env, napi_value obj, const char *key, double dflt) {
  napi_value v;
  double d = dflt;
  if (get_prop(env, obj, key, &v)) napi_get_value_double(env, v, &d);
  return d;
}
static bool get_bool(napi_env env, napi_value obj, const char *key) {
  napi_value v;
  bool b = false;
  if (get_prop(env, obj, key, &v)) napi_get_value_bool(env, v, &b);
  return b;
}

/* MountOptions' kernel cache lifetimes and request size */
struct mount_limits {
  double attr_timeout, entry_timeout, negative_timeout;
  unsigned max_write;
};
/* No fallbacks here: the values come from src/config/defaults.ts (MountOptions requires them). */
static bool mount_limits_init(napi_env env, napi_value options, struct mount_limits *l) {
  l->attr_timeout = get_num(env, options, "attrTimeoutSec", NAN);
  l->entry_timeout = get_num(env, options, "entryTimeoutSec", NAN);
  l->negative_timeout = get_num(env, options, "negativeTimeoutSec", NAN);
  double max_write = get_num(env, options, "maxWriteBytes", NAN);
  if (isnan(l->attr_timeout) || isnan(l->entry_timeout) || isnan(l->negative_timeout) || isnan(max_write)) {
    napi_throw_type_error(env, NULL, "mount options need attrTimeoutSec, entryTimeoutSec, negativeTimeoutSec and maxWriteBytes");
    return false;
  }
  l->max_write = (unsigned)max_write;
  return true;
}

/* The statfs answer JS wrote into the scratch doubles (packStatfs order). */
static void fill_statvfs_from(struct statvfs *sv, const double *f) {
  memset(sv, 0, sizeof *sv);
  sv->f_bsize = (unsigned long)f[0];
  sv->f_frsize = (unsigned long)f[1];
  sv->f_blocks = (fsblkcnt_t)f[2];
  sv->f_bfree = (fsblkcnt_t)f[3];
  sv->f_bavail = (fsblkcnt_t)f[4];
  sv->f_files = (fsfilcnt_t)f[5];
  sv->f_ffree = (fsfilcnt_t)f[6];
  sv->f_favail = (fsfilcnt_t)f[7];
  sv->f_namemax = (unsigned long)f[8];
}

/* A JS handler threw (and its request was answered): let it surface as an uncaught exception. */
static void rethrow_pending(napi_env env) {
  bool pending = false;
  napi_is_exception_pending(env, &pending);
  if (pending) {
    napi_value err;
    napi_get_and_clear_last_exception(env, &err);
    napi_fatal_exception(env, err);
  }
}

/* handler(-1, op_closed, undefined...): the session has ended */
static void call_closed(napi_env env, napi_value recv, napi_value fn, int op_closed) {
  napi_value argv[12], ret, undef;
  napi_get_undefined(env, &undef);
  for (int k = 0; k < 12; k++) argv[k] = undef;
  napi_create_double(env, -1, &argv[0]);
  napi_create_int32(env, op_closed, &argv[1]);
  if (napi_call_function(env, recv, fn, 12, argv, &ret) != napi_ok) rethrow_pending(env);
}

/* The session's arguments from MountOptions: `-o fsname=..,default_permissions,max_read=N
 * [,allow_other]` and `-d` when debug. max_read must equal conn->max_read set in init. */
struct mount_args {
  char opts[1024];
  char *argv[5];
  int argc;
};
static void mount_args_init(napi_env env, napi_value options, unsigned max_read, struct mount_args *a) {
  char fsname[256] = "ledgerfs";
  size_t len;
  napi_value v;
  if (get_prop(env, options, "fsName", &v)) napi_get_value_string_utf8(env, v, fsname, sizeof fsname, &len);
  for (char *p = fsname; *p; p++) if (*p == ',' || *p == '\\') *p = '_'; /* option syntax */
  snprintf(a->opts, sizeof a->opts, "fsname=%s,subtype=ledgerfs,default_permissions,max_read=%u%s", fsname,
           max_read, get_bool(env, options, "allowOther") ? ",allow_other" : "");
  a->argv[0] = "ledgerfs"; a->argv[1] = "-o"; a->argv[2] = a->opts; a->argv[3] = "-d"; a->argv[4] = NULL;
  a->argc = get_bool(env, options, "debug") ? 4 : 3;
}

/* 9 doubles (mode uid gid size ino nlink blocks blksize rdev) and 3 int64 ns times */
/* Times are signed 64-bit seconds (`sec`) and nanoseconds (`nsec`) apart: a nanosecond count in
 * 64 bits ends in 2262 (and starts in 1677), and a file system keeps times far beyond both. */
static void fill_stat_from(struct stat *st, const double *f, const int64_t *sec, const int32_t *nsec) {
  memset(st, 0, sizeof *st);
  st->st_mode = (mode_t)f[0];
  st->st_uid = (uid_t)f[1];
  st->st_gid = (gid_t)f[2];
  st->st_size = (off_t)f[3];
  st->st_ino = (ino_t)f[4];
  st->st_nlink = (nlink_t)f[5];
  st->st_blocks = (blkcnt_t)f[6];
  st->st_blksize = (blksize_t)f[7];
  st->st_rdev = (dev_t)f[8];
  struct timespec *ts[3] = {&st->st_atim, &st->st_mtim, &st->st_ctim};
  for (int i = 0; i < 3; i++) {
    ts[i]->tv_sec = (time_t)sec[i];
    ts[i]->tv_nsec = nsec[i];
  }
}

/* Memory a JS Buffer views goes back to libfuse or a pool: detach the Buffer, drop the ref. */
static void detach_buffer(napi_env env, napi_ref *ref) {
  if (!*ref) return;
  napi_value b, ab = NULL;
  if (napi_get_reference_value(env, *ref, &b) == napi_ok && b) {
    napi_typedarray_type t;
    size_t len, off;
    void *data;
    if (napi_get_typedarray_info(env, b, &t, &len, &data, &ab, &off) == napi_ok) napi_detach_arraybuffer(env, ab);
  }
  napi_delete_reference(env, *ref);
  *ref = NULL;
}

/* the external (mount handle) in a call's first argument; NULL with an exception pending */
static void *arg_external(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  void *p = NULL;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
      napi_get_value_external(env, argv[0], &p) != napi_ok) {
    throw_last(env, "mount handle");
    return NULL;
  }
  return p;
}

/* What calling a mount's JS handler from libuv callbacks needs: the handler and an async
 * resource (one callback scope per batch). */
struct js_target {
  napi_ref handler, resource;
  napi_async_context actx;
};
static void js_target_init(napi_env env, struct js_target *t, const char *name, napi_value handler) {
  napi_value resource, n;
  napi_create_object(env, &resource);
  napi_create_string_utf8(env, name, NAPI_AUTO_LENGTH, &n);
  napi_async_init(env, resource, n, &t->actx);
  napi_create_reference(env, resource, 1, &t->resource);
  napi_create_reference(env, handler, 1, &t->handler);
}
static void js_target_free(napi_env env, struct js_target *t) {
  napi_delete_reference(env, t->handler);
  napi_delete_reference(env, t->resource);
  napi_async_destroy(env, t->actx);
}

/* the mount handle JS holds: the mount's memory outlives it only until destroy() closed the
 * uv handle, so the external frees nothing itself */
static void mnt_finalize(napi_env env, void *data, void *hint) { (void)env; (void)data; (void)hint; }
static napi_value mount_handle(napi_env env, void *m) {
  napi_value handle;
  CHECK(napi_create_external(env, m, mnt_finalize, NULL, &handle));
  return handle;
}

/* The addon's exports: mount, destroy, reply, unref, setScratch, libfuseVersion. */
static napi_value define_exports(napi_env env, napi_value exports, napi_callback mount, napi_callback destroy,
                                 napi_callback reply, napi_callback unref, napi_callback set_scratch) {
  napi_property_descriptor props[] = {
    {"mount", NULL, mount, NULL, NULL, NULL, napi_default, NULL},
    {"destroy", NULL, destroy, NULL, NULL, NULL, napi_default, NULL},
    {"reply", NULL, reply, NULL, NULL, NULL, napi_default, NULL},
    {"unref", NULL, unref, NULL, NULL, NULL, napi_default, NULL},
    {"setScratch", NULL, set_scratch, NULL, NULL, NULL, napi_default, NULL},
  };
  napi_define_properties(env, exports, sizeof props / sizeof *props, props);
  napi_value ver;
  napi_create_string_utf8(env, fuse_pkgversion(), NAPI_AUTO_LENGTH, &ver);
  napi_set_named_property(env, exports, "libfuseVersion", ver);
  return exports;
}

#endif
