/*
 * The daemon's open-file limit (src/backend/fd-limit.ts): getrlimit/setrlimit(RLIMIT_NOFILE),
 * which Node's API lacks. The daemon raises its soft limit to the hard one at start, so that
 * the local store's descriptor pool (src/backend/fd-pool.ts) may hold as many backing files as
 * the system lets this process have; the pool is then sized below the limit it reads here.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <node_api.h>
#include <stdbool.h>
#include <string.h>
#include <sys/resource.h>

/* noFileLimit(raise) -> [soft, hard] after raising soft to hard when `raise` is true;
 * RLIM_INFINITY is reported as -1. Throws an Error whose code is the errno name. */
static napi_value js_no_file_limit(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  bool raise = false;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) == napi_ok && argc >= 1) napi_get_value_bool(env, argv[0], &raise);
  struct rlimit lim;
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) {
    const char *name = strerrorname_np(errno);
    napi_throw_error(env, name ? name : "EIO", "getrlimit(RLIMIT_NOFILE) failed");
    return NULL;
  }
  if (raise && lim.rlim_cur != lim.rlim_max) {
    struct rlimit want = {lim.rlim_max, lim.rlim_max};
    if (setrlimit(RLIMIT_NOFILE, &want) != 0) {
      const char *name = strerrorname_np(errno);
      napi_throw_error(env, name ? name : "EIO", "setrlimit(RLIMIT_NOFILE) failed");
      return NULL;
    }
    lim = want;
  }
  napi_value out, soft, hard;
  napi_create_array_with_length(env, 2, &out);
  napi_create_double(env, lim.rlim_cur == RLIM_INFINITY ? -1 : (double)lim.rlim_cur, &soft);
  napi_create_double(env, lim.rlim_max == RLIM_INFINITY ? -1 : (double)lim.rlim_max, &hard);
  napi_set_element(env, out, 0, soft);
  napi_set_element(env, out, 1, hard);
  return out;
}

/* the limit functions of the local-store addon (ledgerfs_local.c) */
void ledgerfs_limits_register(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
    {"noFileLimit", NULL, js_no_file_limit, NULL, NULL, NULL, napi_default, NULL},
  };
  napi_define_properties(env, exports, sizeof props / sizeof *props, props);
}
