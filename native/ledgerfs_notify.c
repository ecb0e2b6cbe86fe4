/*
 * systemd's readiness protocol (sd_notify(3)) for `ledgerfs mount` under Type=notify: one
 * datagram such as "READY=1" to the AF_UNIX socket named by $NOTIFY_SOCKET. Node has no unix
 * datagram sockets, and systemd accepts the message only from the service's main process
 * (NotifyAccess=main), so it is sent from the daemon's own process here rather than by a helper.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <node_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static napi_value throw_errno(napi_env env, int err, const char *what) {
  const char *name = strerrorname_np(err);
  napi_throw_error(env, name ? name : "EIO", what);
  return NULL;
}

/* sdNotify(state) -> true when sent, false when $NOTIFY_SOCKET is unset. Throws with the errno
 * name as code when the socket is named but the message cannot be sent. */
static napi_value js_sd_notify(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  char state[4096];
  size_t len = 0;
  napi_value result;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
      napi_get_value_string_utf8(env, argv[0], state, sizeof state, &len) != napi_ok) {
    napi_throw_type_error(env, NULL, "sdNotify(state: string)");
    return NULL;
  }
  const char *sock = getenv("NOTIFY_SOCKET");
  if (sock == NULL || sock[0] == '\0') {
    napi_get_boolean(env, false, &result);
    return result;
  }
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  size_t plen = strlen(sock);
  if ((sock[0] != '/' && sock[0] != '@') || plen >= sizeof addr.sun_path) return throw_errno(env, EINVAL, "NOTIFY_SOCKET is not an absolute path or @abstract name");
  memcpy(addr.sun_path, sock, plen);
  if (sock[0] == '@') addr.sun_path[0] = '\0'; /* the abstract namespace */
  socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + plen);
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return throw_errno(env, errno, "socket(AF_UNIX, SOCK_DGRAM) failed");
  ssize_t n = sendto(fd, state, len, MSG_NOSIGNAL, (struct sockaddr *)&addr, alen);
  int err = errno;
  close(fd);
  if (n < 0) return throw_errno(env, err, "sendto(NOTIFY_SOCKET) failed");
  napi_get_boolean(env, true, &result);
  return result;
}

/* the notify function of the local-store addon (ledgerfs_local.c) */
void ledgerfs_notify_register(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
    {"sdNotify", NULL, js_sd_notify, NULL, NULL, NULL, napi_default, NULL},
  };
  napi_define_properties(env, exports, sizeof props / sizeof *props, props);
}
