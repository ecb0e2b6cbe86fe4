/*
 * The local store's system calls that Node's fs lacks, as one addon that links no libfuse (so the
 * backend may use it on any binding): openat2 beneath the store's root (ledgerfs_beneath.c) and
 * fallocate, copy_file_range and SEEK_DATA/SEEK_HOLE on fds (ledgerfs_fdops.c), and the
 * process's open-file limit (ledgerfs_limits.c), and extended attributes and nanosecond times
 * on a node's O_PATH descriptor (ledgerfs_xattr.c), and systemd's readiness message
 * (ledgerfs_notify.c).
 */
#include <node_api.h>

void ledgerfs_beneath_register(napi_env env, napi_value exports);
void ledgerfs_fdops_register(napi_env env, napi_value exports);
void ledgerfs_limits_register(napi_env env, napi_value exports);
void ledgerfs_xattr_register(napi_env env, napi_value exports);
void ledgerfs_notify_register(napi_env env, napi_value exports);

static napi_value init(napi_env env, napi_value exports) {
  ledgerfs_beneath_register(env, exports);
  ledgerfs_fdops_register(env, exports);
  ledgerfs_limits_register(env, exports);
  ledgerfs_xattr_register(env, exports);
  ledgerfs_notify_register(env, exports);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
