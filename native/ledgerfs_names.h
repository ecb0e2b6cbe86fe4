/*
 * Names are bytes to the kernel and strings to JS. A byte that is not part of valid UTF-8 is the
 * lone surrogate U+DC80+byte in the string (PEP 383's "surrogateescape", what Python's os module
 * does), so every name the kernel gives round-trips exactly, and valid UTF-8 reads as itself
 * (src/core/names.ts is the same mapping for the TS side).
 * Fast paths: a name of valid UTF-8 is napi_create_string_utf8 after one scan; a string going
 * out is napi_get_value_string_utf8, redone only when its bytes hold EF BF BD (V8 writes that
 * for a lone surrogate, and it is rare as a real character).
 * Static functions: each addon source is its own translation unit.
 */
#ifndef LEDGERFS_NAMES_H
#define LEDGERFS_NAMES_H
#include <node_api.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* length of the valid UTF-8 sequence at s (n bytes left; s[0] >= 0x80) and its code point, or 0:
 * strict as Python's decoder (no overlong forms, no surrogates, nothing past U+10FFFF) */
static inline size_t names_utf8_seq(const unsigned char *s, size_t n, uint32_t *cp) {
  unsigned char c = s[0];
  if (c >= 0xC2 && c <= 0xDF) {
    if (n < 2 || (s[1] & 0xC0) != 0x80) return 0;
    *cp = ((uint32_t)(c & 0x1F) << 6) | (s[1] & 0x3F);
    return 2;
  }
  if (c >= 0xE0 && c <= 0xEF) {
    if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0;
    if (c == 0xE0 && s[1] < 0xA0) return 0; /* overlong */
    if (c == 0xED && s[1] >= 0xA0) return 0; /* a surrogate */
    *cp = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) return 0;
    if (c == 0xF0 && s[1] < 0x90) return 0; /* overlong */
    if (c == 0xF4 && s[1] >= 0x90) return 0; /* past U+10FFFF */
    *cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) | ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    return 4;
  }
  return 0;
}

/* `len` bytes of a name (or path, or symlink target) as a JS string */
static inline napi_status name_to_js(napi_env env, const char *p, size_t len, napi_value *out) {
  const unsigned char *s = (const unsigned char *)p;
  size_t i = 0;
  uint32_t cp;
  while (i < len) {
    if (s[i] < 0x80) { i++; continue; }
    size_t k = names_utf8_seq(s + i, len - i, &cp);
    if (!k) break;
    i += k;
  }
  if (i == len) return napi_create_string_utf8(env, p, len, out);
  /* each byte gives at most one UTF-16 unit (a 4-byte sequence gives two) */
  char16_t *u = malloc((len ? len : 1) * sizeof(char16_t));
  if (!u) return napi_generic_failure;
  size_t n = 0;
  for (i = 0; i < len;) {
    if (s[i] < 0x80) { u[n++] = s[i++]; continue; }
    size_t k = names_utf8_seq(s + i, len - i, &cp);
    if (!k) { u[n++] = (char16_t)(0xDC00 + s[i]); i++; continue; }
    if (cp >= 0x10000) {
      cp -= 0x10000;
      u[n++] = (char16_t)(0xD800 + (cp >> 10));
      u[n++] = (char16_t)(0xDC00 + (cp & 0x3FF));
    } else {
      u[n++] = (char16_t)cp;
    }
    i += k;
  }
  napi_status st = napi_create_string_utf16(env, u, n, out);
  free(u);
  return st;
}

static inline napi_status name_to_js_z(napi_env env, const char *p, napi_value *out) {
  return name_to_js(env, p, strlen(p), out);
}

/* UTF-16 to bytes, U+DC80..U+DCFF alone back to the byte it stands for; `buf` has `cap` bytes
 * (a NUL is written when it fits). Returns the byte length the whole string needs. */
static inline size_t names_encode16(const char16_t *u, size_t n, char *buf, size_t cap) {
  size_t at = 0;
#define PUT(b) do { if (at < cap) buf[at] = (char)(b); at++; } while (0)
  for (size_t i = 0; i < n; i++) {
    uint32_t c = u[i];
    if (c < 0x80) { PUT(c); continue; }
    if (c < 0x800) { PUT(0xC0 | (c >> 6)); PUT(0x80 | (c & 0x3F)); continue; }
    if (c >= 0xD800 && c <= 0xDBFF && i + 1 < n && u[i + 1] >= 0xDC00 && u[i + 1] <= 0xDFFF) {
      c = 0x10000 + ((c - 0xD800) << 10) + (u[i + 1] - 0xDC00);
      i++;
      PUT(0xF0 | (c >> 18)); PUT(0x80 | ((c >> 12) & 0x3F)); PUT(0x80 | ((c >> 6) & 0x3F)); PUT(0x80 | (c & 0x3F));
      continue;
    }
    if (c >= 0xDC80 && c <= 0xDCFF) { PUT(c - 0xDC00); continue; }
    if (c >= 0xD800 && c <= 0xDFFF) c = 0xFFFD; /* any other lone surrogate: as V8 writes it */
    PUT(0xE0 | (c >> 12)); PUT(0x80 | ((c >> 6) & 0x3F)); PUT(0x80 | (c & 0x3F));
  }
#undef PUT
  if (at < cap) buf[at] = 0;
  return at;
}

static inline int names_has_fffd(const char *p, size_t len) {
  return len >= 3 && memmem(p, len, "\xEF\xBF\xBD", 3) != NULL;
}

/*
 * The bytes of a JS name: a string (escapes mapped back) or a Buffer (taken as is). With buf NULL
 * only the length is computed. `*len` is the byte length of the whole name; the bytes (and a NUL)
 * fit when *len < cap. napi_string_expected for anything else.
 */
static inline napi_status name_from_js(napi_env env, napi_value v, char *buf, size_t cap, size_t *len) {
  bool isbuf = false;
  if (napi_is_buffer(env, v, &isbuf) == napi_ok && isbuf) {
    void *data;
    size_t n;
    napi_status st = napi_get_buffer_info(env, v, &data, &n);
    if (st != napi_ok) return st;
    if (buf && n < cap) { memcpy(buf, data, n); buf[n] = 0; }
    *len = n;
    return napi_ok;
  }
  size_t n = 0;
  napi_status st;
  if (buf && cap) {
    st = napi_get_value_string_utf8(env, v, buf, cap, &n);
    if (st != napi_ok) return st;
    /* V8 stops before a character that does not fit whole (up to 4 bytes) and says nothing:
     * only with room for one more left over is the string known to be complete */
    if (n + 4 < cap && !names_has_fffd(buf, n)) { *len = n; return napi_ok; }
  } else {
    /* length only: V8 counts a lone surrogate as 3 bytes, an escape is 1 */
    st = napi_get_value_string_utf8(env, v, NULL, 0, &n);
    if (st != napi_ok) return st;
  }
  /* truncated, or EF BF BD seen (a real U+FFFD or an escape): through UTF-16 */
  size_t units;
  st = napi_get_value_string_utf16(env, v, NULL, 0, &units);
  if (st != napi_ok) return st;
  char16_t small[512], *u = units < 512 ? small : malloc((units + 1) * sizeof(char16_t));
  if (!u) return napi_generic_failure;
  st = napi_get_value_string_utf16(env, v, u, units + 1, &units);
  if (st == napi_ok) *len = names_encode16(u, units, buf ? buf : (char *)"", buf ? cap : 0);
  if (u != small) free(u);
  return st;
}

#endif
