/* config.c -- strict parsing of the hook environment (see hookcore.h for the grammar).
 *
 * Everything here is pure: no globals, no allocation, no getenv (hk_config_from_environ only
 * passes `environ` on). Every rejection produces one line naming the variable and its value.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

extern char **environ;

typedef unsigned __int128 hk_u128;

/* ---------------------------------------------------------------------------------------------
   Messages                                                                                     */

const char *hk_strerror(int code) {
  switch (code) {
    case HK_OK: return "ok";
    case HK_ENOMEM: return "out of memory quota";
    case HK_EFAILCLOSED: return "hookcore failed closed (bad configuration or ledger)";
    case HK_EINVAL: return "invalid argument";
    case HK_ENODEV: return "device is not part of the claim";
    case HK_ENOENT: return "allocation not tracked";
    case HK_EEXIST: return "allocation already tracked";
    case HK_ENOSPC: return "no free slot";
    case HK_EIO: return "I/O error";
    default: return "unknown hookcore error";
  }
}

void hk__errf(char *err, size_t errlen, const char *fmt, ...) {
  if (err == NULL || errlen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  for (char *p = err; *p; p++) {  // one line, whatever the caller formatted in
    if (*p == '\n' || *p == '\r') *p = ' ';
  }
}

/* Copy `value` into dst as printable ASCII: `"` and `\` escaped, other bytes as \xNN, at most
   48 source bytes (then "..."). dst is always NUL-terminated. */
void hk__quote(char *dst, size_t dstlen, const char *value) {
  static const char hex[] = "0123456789abcdef";
  size_t o = 0;
  if (dstlen == 0) return;
  for (size_t i = 0; value[i] != '\0'; i++) {
    unsigned char c = (unsigned char)value[i];
    char buf[5];
    size_t n;
    if (i >= 48) { memcpy(buf, "...", 3); n = 3; }
    else if (c == '"' || c == '\\') { buf[0] = '\\'; buf[1] = (char)c; n = 2; }
    else if (c >= 0x20 && c < 0x7f) { buf[0] = (char)c; n = 1; }
    else { buf[0] = '\\'; buf[1] = 'x'; buf[2] = hex[c >> 4]; buf[3] = hex[c & 15]; n = 4; }
    if (o + n >= dstlen) break;
    memcpy(dst + o, buf, n);
    o += n;
    if (i >= 48) break;
  }
  dst[o] = '\0';
}

static int reject(const char *name, const char *value, char *err, size_t errlen, const char *why) {
  char q[208];
  hk__quote(q, sizeof q, value);
  hk__errf(err, errlen, "%s=\"%s\": %s", name, q, why);
  return HK_EFAILCLOSED;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* ---------------------------------------------------------------------------------------------
   Memory quantities                                                                            */

#define MEM_UNITS "use bytes, Ki/Mi/Gi/Ti/Pi/Ei, M/G/T/P/E (10^6..10^18) or HAMi k/m/g (KiB/MiB/GiB)"

/* value = mant * 10^scale * 2^shift, reduced exactly; HK_OK or a reason. */
static const char *mem_reduce(hk_u128 mant, int scale, unsigned shift, uint64_t *out) {
  if (mant == 0) return "must be greater than 0 (unset the variable for no limit)";
  while (scale < 0 && mant % 10 == 0) { mant /= 10; scale++; }
  if (scale < 0) {                  /* divide by 2^k * 5^k, cancelling 2s against the shift */
    unsigned k = (unsigned)-scale, k2 = k;
    while (k2 > 0 && shift > 0) { k2--; shift--; }
    for (unsigned i = 0; i < k; i++) {
      if (mant % 5 != 0) return "not a whole number of bytes";
      mant /= 5;
    }
    if (k2 >= 128 || (mant & ((((hk_u128)1) << k2) - 1)) != 0) return "not a whole number of bytes";
    mant >>= k2;
  }
  for (; scale > 0; scale--) {
    if (mant > HK_MEM_MAX / 10) return "too large (at most 4Ei)";
    mant *= 10;
  }
  if (mant > HK_MEM_MAX || (shift > 0 && mant > (HK_MEM_MAX >> shift))) return "too large (at most 4Ei)";
  *out = (uint64_t)(mant << shift);
  return NULL;
}

int hk_parse_mem(const char *name, const char *value, uint64_t *bytes, char *err, size_t errlen) {
  const char *p = value;
  hk_u128 mant = 0;
  int sig = 0, digits = 0, scale = 0;
  unsigned shift = 0;
  if (bytes) *bytes = 0;
  if (value == NULL || name == NULL || bytes == NULL) {
    hk__errf(err, errlen, "hk_parse_mem: NULL argument");
    return HK_EINVAL;
  }
  if (*p == '\0') return reject(name, value, err, errlen, "empty value");
  if (*p == '-') return reject(name, value, err, errlen, "negative quantity");
  if (*p == '+') p++;
  for (; is_digit(*p); p++, digits++) {
    if (mant == 0 && *p == '0') continue;   /* leading zeros */
    if (++sig > 38) return reject(name, value, err, errlen, "too many digits");
    mant = mant * 10 + (hk_u128)(*p - '0');
  }
  if (*p == '.') {
    p++;
    for (; is_digit(*p); p++, digits++) {
      if (sig > 0 || *p != '0') {
        if (++sig > 38) return reject(name, value, err, errlen, "too many digits");
      }
      mant = mant * 10 + (hk_u128)(*p - '0');
      scale--;
    }
  }
  if (digits == 0) {
    return reject(name, value, err, errlen, "not a number (" MEM_UNITS ")");
  }
  if ((*p == 'e' || *p == 'E') &&
      (is_digit(p[1]) || ((p[1] == '+' || p[1] == '-') && is_digit(p[2])))) {
    int neg = 0, ev = 0, en = 0;
    p++;
    if (*p == '+' || *p == '-') neg = (*p++ == '-');
    for (; is_digit(*p); p++) {
      if (ev == 0 && *p == '0') continue;
      if (++en > 3) return reject(name, value, err, errlen, "exponent out of range");
      ev = ev * 10 + (*p - '0');
    }
    scale += neg ? -ev : ev;
  } else if (*p != '\0') {
    static const struct { const char *s; int exp10; unsigned shift; } units[] = {
      {"Ki", 0, 10}, {"Mi", 0, 20}, {"Gi", 0, 30}, {"Ti", 0, 40}, {"Pi", 0, 50}, {"Ei", 0, 60},
      {"k", 0, 10}, {"K", 0, 10}, {"m", 0, 20}, {"g", 0, 30},          /* HAMi, binary */
      {"M", 6, 0}, {"G", 9, 0}, {"T", 12, 0}, {"P", 15, 0}, {"E", 18, 0}, /* Kubernetes, decimal */
    };
    size_t i, n = sizeof units / sizeof units[0];
    for (i = 0; i < n; i++) {
      if (strcmp(p, units[i].s) == 0) break;
    }
    if (i == n) {
      char q[64], msg[200];
      hk__quote(q, sizeof q, p);
      snprintf(msg, sizeof msg, "unknown unit \"%s\" (%s)", q, MEM_UNITS);
      return reject(name, value, err, errlen, msg);
    }
    scale += units[i].exp10;
    shift = units[i].shift;
    p += strlen(units[i].s);
  }
  if (*p != '\0') return reject(name, value, err, errlen, "trailing characters after the quantity");
  const char *why = mem_reduce(mant, scale, shift, bytes);
  if (why != NULL) {
    *bytes = 0;
    return reject(name, value, err, errlen, why);
  }
  return HK_OK;
}

int hk_parse_sm(const char *name, const char *value, uint32_t *percent, char *err, size_t errlen) {
  uint32_t v = 0;
  int sig = 0;
  const char *p = value;
  if (percent) *percent = 0;
  if (value == NULL || name == NULL || percent == NULL) {
    hk__errf(err, errlen, "hk_parse_sm: NULL argument");
    return HK_EINVAL;
  }
  if (*p == '\0') return reject(name, value, err, errlen, "empty value");
  for (; is_digit(*p); p++) {
    if (v == 0 && *p == '0') continue;
    if (++sig > 3) break;
    v = v * 10 + (uint32_t)(*p - '0');
  }
  if (*p != '\0' && !is_digit(*p)) {
    return reject(name, value, err, errlen, "not a whole percentage (expected 1..100)");
  }
  if (sig > 3 || v > 100) return reject(name, value, err, errlen, "out of range (expected 1..100)");
  if (v == 0) {
    return reject(name, value, err, errlen,
                  "0 is not a valid compute share (expected 1..100; 100 or unset = no limit)");
  }
  *percent = v;
  return HK_OK;
}

/* ---------------------------------------------------------------------------------------------
   UUIDs                                                                                        */

void hk_uuid_format(const unsigned char raw[16], char out[HK_UUID_MAX]) {
  static const char hex[] = "0123456789abcdef";
  char *o = out;
  memcpy(o, "GPU-", 4);
  o += 4;
  for (int i = 0; i < 16; i++) {
    if (i == 4 || i == 6 || i == 8 || i == 10) *o++ = '-';
    *o++ = hex[raw[i] >> 4];
    *o++ = hex[raw[i] & 15];
  }
  *o = '\0';
}

static char lower(char c) { return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c; }

static const char *skip_gpu_prefix(const char *s) {
  if (lower(s[0]) == 'g' && lower(s[1]) == 'p' && lower(s[2]) == 'u' && s[3] == '-') return s + 4;
  return s;
}

int hk_uuid_equal(const char *a, const char *b) {
  if (a == NULL || b == NULL || *a == '\0' || *b == '\0') return 0;
  a = skip_gpu_prefix(a);
  b = skip_gpu_prefix(b);
  for (; *a && *b; a++, b++) {
    if (lower(*a) != lower(*b)) return 0;
  }
  return *a == *b;
}

static int uuid_char_ok(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '-' || c == '_' ||
         c == '/' || c == ':' || c == '.';
}

/* ---------------------------------------------------------------------------------------------
   The environment                                                                              */

enum { V_MEM, V_SM, V_UUID, V_PATH };

typedef struct var_spec {
  const char *name;   /* exact name, or prefix when indexed */
  int kind;
  int indexed;
} var_spec;

static const var_spec g_vars[] = {
  {"CUDA_DEVICE_MEMORY_LIMIT", V_MEM, 0},
  {"CUDA_DEVICE_MEMORY_LIMIT_", V_MEM, 1},
  {"CUDA_DEVICE_SM_LIMIT", V_SM, 0},
  {"CUDA_DEVICE_SM_LIMIT_", V_SM, 1},
  {"CUDA_DEVICE_MEMORY_SHARED_CACHE", V_PATH, 0},
  {"HOOKCORE_DEVICE_UUID_", V_UUID, 1},
};

/* Index suffix: "0".."15", no sign, no leading zero. -1 if malformed. */
static int parse_index(const char *s, size_t n) {
  int v = 0;
  if (n == 0 || n > 2 || (n > 1 && s[0] == '0')) return -1;
  for (size_t i = 0; i < n; i++) {
    if (!is_digit(s[i])) return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v < HK_MAX_DEVICES ? v : -1;
}

typedef struct seen {
  unsigned mem_default : 1, sm_default : 1, path : 1;
  uint32_t mem_given;   /* bit i: CUDA_DEVICE_MEMORY_LIMIT_<i> seen */
  uint32_t sm_given;
  uint32_t uuid_given;
} seen;

int hk_config_parse(const char *const *envp, hk_config *out, char *err, size_t errlen) {
  uint64_t mem_default = HK_MEM_UNLIMITED;
  uint32_t sm_default = HK_SM_UNLIMITED;
  seen s;
  int max_index = -1;
  if (err && errlen) err[0] = '\0';
  if (out == NULL) {
    hk__errf(err, errlen, "hk_config_parse: NULL config");
    return HK_EINVAL;
  }
  memset(&s, 0, sizeof s);
  memset(out, 0, sizeof *out);
  for (int i = 0; i < HK_MAX_DEVICES; i++) {
    out->mem_limit[i] = HK_MEM_UNLIMITED;
    out->sm_limit[i] = HK_SM_UNLIMITED;
  }
  for (size_t e = 0; envp != NULL && envp[e] != NULL; e++) {
    const char *entry = envp[e];
    const char *eq = strchr(entry, '=');
    if (eq == NULL) continue;
    size_t nlen = (size_t)(eq - entry);
    const char *value = eq + 1;
    for (size_t v = 0; v < sizeof g_vars / sizeof g_vars[0]; v++) {
      const var_spec *vs = &g_vars[v];
      size_t plen = strlen(vs->name);
      int idx = -1;
      char name[64];
      if (vs->indexed) {
        if (nlen < plen || strncmp(entry, vs->name, plen) != 0) continue;
        idx = parse_index(entry + plen, nlen - plen);
        if (idx < 0) {
          char nm[80], qn[128], q[128];
          size_t k = nlen < sizeof nm - 1 ? nlen : sizeof nm - 1;
          memcpy(nm, entry, k);
          nm[k] = '\0';
          hk__quote(qn, sizeof qn, nm);
          hk__quote(q, sizeof q, value);
          hk__errf(err, errlen, "%s=\"%s\": bad device index in the variable name (expected %s0..%s%d)",
                   qn, q, vs->name, vs->name, HK_MAX_DEVICES - 1);
          memset(out, 0, sizeof *out);
          return HK_EFAILCLOSED;
        }
      } else if (nlen != plen || strncmp(entry, vs->name, plen) != 0) {
        continue;
      }
      snprintf(name, sizeof name, "%.*s", (int)nlen, entry);
      int rc = HK_OK;
      uint32_t bit = idx >= 0 ? (1u << idx) : 0;
      switch (vs->kind) {
        case V_MEM:
          if (idx < 0) {
            if (s.mem_default) break;          /* first occurrence wins, like getenv */
            s.mem_default = 1;
            rc = hk_parse_mem(name, value, &mem_default, err, errlen);
          } else {
            if (s.mem_given & bit) break;
            s.mem_given |= bit;
            rc = hk_parse_mem(name, value, &out->mem_limit[idx], err, errlen);
          }
          break;
        case V_SM:
          if (idx < 0) {
            if (s.sm_default) break;
            s.sm_default = 1;
            rc = hk_parse_sm(name, value, &sm_default, err, errlen);
          } else {
            if (s.sm_given & bit) break;
            s.sm_given |= bit;
            rc = hk_parse_sm(name, value, &out->sm_limit[idx], err, errlen);
          }
          break;
        case V_UUID: {
          if (s.uuid_given & bit) break;
          s.uuid_given |= bit;
          size_t ulen = strlen(value);
          if (ulen == 0) rc = reject(name, value, err, errlen, "empty UUID");
          else if (ulen >= HK_UUID_MAX) rc = reject(name, value, err, errlen, "UUID too long");
          for (size_t k = 0; rc == HK_OK && k < ulen; k++) {
            if (!uuid_char_ok(value[k])) rc = reject(name, value, err, errlen, "invalid character in UUID");
          }
          if (rc == HK_OK) memcpy(out->uuid[idx], value, ulen + 1);
          break;
        }
        case V_PATH: {
          if (s.path) break;
          s.path = 1;
          size_t plen2 = strlen(value);
          if (plen2 == 0) rc = reject(name, value, err, errlen, "empty path");
          else if (value[0] != '/') rc = reject(name, value, err, errlen, "not an absolute path");
          else if (plen2 >= HK_PATH_MAX) rc = reject(name, value, err, errlen, "path too long");
          if (rc == HK_OK) memcpy(out->ledger_path, value, plen2 + 1);
          break;
        }
      }
      if (rc != HK_OK) {
        memset(out, 0, sizeof *out);
        return HK_EFAILCLOSED;
      }
      if (idx > max_index) max_index = idx;
      break;
    }
  }
  /* Defaults, flags, UUID rules. */
  int any_limit = 0;
  for (int i = 0; i < HK_MAX_DEVICES; i++) {
    uint32_t bit = 1u << i;
    if (!(s.mem_given & bit)) out->mem_limit[i] = mem_default;
    if (!(s.sm_given & bit)) out->sm_limit[i] = sm_default;
    if (out->mem_limit[i] != HK_MEM_UNLIMITED) out->flags[i] |= HK_CFG_MEM_SET;
    if (out->sm_limit[i] != HK_SM_UNLIMITED) out->flags[i] |= HK_CFG_SM_SET;
    if (s.uuid_given & bit) out->flags[i] |= HK_CFG_UUID_SET;
    any_limit |= (out->flags[i] & (HK_CFG_MEM_SET | HK_CFG_SM_SET)) != 0;
  }
  out->device_count = (uint32_t)(max_index + 1);
  out->uuid_keyed = s.uuid_given != 0;
  if (out->uuid_keyed) {
    for (int i = 0; i < HK_MAX_DEVICES; i++) {
      uint32_t bit = 1u << i;
      if ((s.mem_given & bit) && !(s.uuid_given & bit)) {
        hk__errf(err, errlen, "CUDA_DEVICE_MEMORY_LIMIT_%d is set but HOOKCORE_DEVICE_UUID_%d is not "
                 "(the claim is keyed by UUID, so this quota would apply to no device)", i, i);
        memset(out, 0, sizeof *out);
        return HK_EFAILCLOSED;
      }
      if ((s.sm_given & bit) && !(s.uuid_given & bit)) {
        hk__errf(err, errlen, "CUDA_DEVICE_SM_LIMIT_%d is set but HOOKCORE_DEVICE_UUID_%d is not "
                 "(the claim is keyed by UUID, so this limit would apply to no device)", i, i);
        memset(out, 0, sizeof *out);
        return HK_EFAILCLOSED;
      }
      for (int j = 0; j < i; j++) {
        if ((s.uuid_given & bit) && (s.uuid_given & (1u << j)) && hk_uuid_equal(out->uuid[i], out->uuid[j])) {
          char q[128];
          hk__quote(q, sizeof q, out->uuid[i]);
          hk__errf(err, errlen, "HOOKCORE_DEVICE_UUID_%d=\"%s\": same device as HOOKCORE_DEVICE_UUID_%d",
                   i, q, j);
          memset(out, 0, sizeof *out);
          return HK_EFAILCLOSED;
        }
      }
    }
  }
  if (!s.path && any_limit) {
    memcpy(out->ledger_path, HK_DEFAULT_LEDGER, sizeof HK_DEFAULT_LEDGER);
  }
  return HK_OK;
}

int hk_config_from_environ(hk_config *out, char *err, size_t errlen) {
  return hk_config_parse((const char *const *)environ, out, err, errlen);
}
