/*
 * N-API helpers of every addon, the libfuse-free one (ledgerfs_local) included: errors that name
 * the addon, and a scratch ArrayBuffer kept alive for native code to write into.
 * Static functions: each addon source is its own translation unit.
 */
#ifndef LEDGERFS_NAPI_H
#define LEDGERFS_NAPI_H
#include <node_api.h>
#include <stdbool.h>
#include <stdio.h>

#ifndef ADDON_NAME
#error "define ADDON_NAME before including ledgerfs_napi.h"
#endif

#define CHECK(call)                                                    \
  do {                                                                 \
    if ((call) != napi_ok) return throw_last(env, #call);              \
  } while (0)

static napi_value throw_last(napi_env env, const char *what) {
  const napi_extended_error_info *info = NULL;
  napi_get_last_error_info(env, &info);
  bool pending = false;
  napi_is_exception_pending(env, &pending);
  if (!pending) {
    char msg[512];
    snprintf(msg, sizeof msg, ADDON_NAME ": %s failed: %s", what,
             info && info->error_message ? info->error_message : "unknown");
    napi_throw_error(env, NULL, msg);
  }
  return NULL;
}

/* setScratch(arrayBuffer) and the like (`what`): keep the buffer alive (one reference) and return
 * its memory, NULL with an exception pending when it is smaller than `min` bytes */
static void *keep_scratch(napi_env env, napi_callback_info info, size_t min, napi_ref *ref, const char *what) {
  size_t argc = 1;
  napi_value argv[1];
  void *data;
  size_t len;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
      napi_get_arraybuffer_info(env, argv[0], &data, &len) != napi_ok) {
    throw_last(env, what);
    return NULL;
  }
  if (len < min) { napi_throw_range_error(env, NULL, ADDON_NAME ": scratch buffer too small"); return NULL; }
  if (*ref) napi_delete_reference(env, *ref);
  if (napi_create_reference(env, argv[0], 1, ref) != napi_ok) { throw_last(env, what); return NULL; }
  return data;
}

#endif
