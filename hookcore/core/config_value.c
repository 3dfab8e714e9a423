/* config_value.c -- the values of a configuration, each read strictly: memory quantities, compute
 * shares, device UUIDs; and the messages every rejection is worded with (hk_strerror, hk__errf,
 * hk__quote). Pure: no globals, no I/O. config.c reads keys and sources with them.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

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
    for (char *p = err; *p; p++) { // one line, whatever the caller formatted in
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
        if (i >= 48) {
            memcpy(buf, "...", 3);
            n = 3;
        } else if (c == '"' || c == '\\') {
            buf[0] = '\\';
            buf[1] = (char)c;
            n = 2;
        } else if (c >= 0x20 && c < 0x7f) {
            buf[0] = (char)c;
            n = 1;
        } else {
            buf[0] = '\\';
            buf[1] = 'x';
            buf[2] = hex[c >> 4];
            buf[3] = hex[c & 15];
            n = 4;
        }
        if (o + n >= dstlen) break;
        memcpy(dst + o, buf, n);
        o += n;
        if (i >= 48) break;
    }
    dst[o] = '\0';
}

int hk__reject(const char *name, const char *value, char *err, size_t errlen, const char *why) {
    char q[208];
    hk__quote(q, sizeof q, value);
    hk__errf(err, errlen, "%s=\"%s\": %s", name, q, why);
    return HK_EFAILCLOSED;
}

/* ---------------------------------------------------------------------------------------------
   Memory quantities                                                                            */

#define MEM_UNITS "use bytes, Ki/Mi/Gi/Ti/Pi/Ei, M/G/T/P/E (10^6..10^18) or HAMi k/m/g (KiB/MiB/GiB)"

/* value = mant * 10^scale * 2^shift, reduced exactly; HK_OK or a reason. */
static const char *mem_reduce(hk_u128 mant, int scale, unsigned shift, uint64_t *out) {
    if (mant == 0) return "must be greater than 0 (unset the variable for no limit)";
    while (scale < 0 && mant % 10 == 0) {
        mant /= 10;
        scale++;
    }
    if (scale < 0) { /* divide by 2^k * 5^k, cancelling 2s against the shift */
        unsigned k = (unsigned)-scale, k2 = k;
        while (k2 > 0 && shift > 0) {
            k2--;
            shift--;
        }
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
    if (*p == '\0') return hk__reject(name, value, err, errlen, "empty value");
    if (*p == '-') return hk__reject(name, value, err, errlen, "negative quantity");
    if (*p == '+') p++;
    for (; hk__is_digit(*p); p++, digits++) {
        if (mant == 0 && *p == '0') continue; /* leading zeros */
        if (++sig > 38) return hk__reject(name, value, err, errlen, "too many digits");
        mant = mant * 10 + (hk_u128)(*p - '0');
    }
    if (*p == '.') {
        p++;
        for (; hk__is_digit(*p); p++, digits++) {
            if (sig > 0 || *p != '0') {
                if (++sig > 38) return hk__reject(name, value, err, errlen, "too many digits");
            }
            mant = mant * 10 + (hk_u128)(*p - '0');
            scale--;
        }
    }
    if (digits == 0) { return hk__reject(name, value, err, errlen, "not a number (" MEM_UNITS ")"); }
    if ((*p == 'e' || *p == 'E') && (hk__is_digit(p[1]) || ((p[1] == '+' || p[1] == '-') && hk__is_digit(p[2])))) {
        int neg = 0, ev = 0, en = 0;
        p++;
        if (*p == '+' || *p == '-') neg = (*p++ == '-');
        for (; hk__is_digit(*p); p++) {
            if (ev == 0 && *p == '0') continue;
            if (++en > 3) return hk__reject(name, value, err, errlen, "exponent out of range");
            ev = ev * 10 + (*p - '0');
        }
        scale += neg ? -ev : ev;
    } else if (*p != '\0') {
        static const struct {
            const char *s;
            int exp10;
            unsigned shift;
        } units[] = {
            {"Ki", 0, 10}, {"Mi", 0, 20}, {"Gi", 0, 30}, {"Ti", 0, 40}, {"Pi", 0, 50},
            {"Ei", 0, 60}, {"k", 0, 10},  {"K", 0, 10},  {"m", 0, 20},  {"g", 0, 30}, /* HAMi, binary */
            {"M", 6, 0},   {"G", 9, 0},   {"T", 12, 0},  {"P", 15, 0},  {"E", 18, 0}, /* Kubernetes, decimal */
        };
        size_t i, n = sizeof units / sizeof units[0];
        for (i = 0; i < n; i++) {
            if (strcmp(p, units[i].s) == 0) break;
        }
        if (i == n) {
            char q[64], msg[200];
            hk__quote(q, sizeof q, p);
            snprintf(msg, sizeof msg, "unknown unit \"%s\" (%s)", q, MEM_UNITS);
            return hk__reject(name, value, err, errlen, msg);
        }
        scale += units[i].exp10;
        shift = units[i].shift;
        p += strlen(units[i].s);
    }
    if (*p != '\0') return hk__reject(name, value, err, errlen, "trailing characters after the quantity");
    const char *why = mem_reduce(mant, scale, shift, bytes);
    if (why != NULL) {
        *bytes = 0;
        return hk__reject(name, value, err, errlen, why);
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
    if (*p == '\0') return hk__reject(name, value, err, errlen, "empty value");
    for (; hk__is_digit(*p); p++) {
        if (v == 0 && *p == '0') continue;
        if (++sig > 3) break;
        v = v * 10 + (uint32_t)(*p - '0');
    }
    if (*p != '\0' && !hk__is_digit(*p)) {
        return hk__reject(name, value, err, errlen, "not a whole percentage (expected 1..100)");
    }
    if (sig > 3 || v > 100) return hk__reject(name, value, err, errlen, "out of range (expected 1..100)");
    if (v == 0) {
        return hk__reject(name, value, err, errlen,
                          "0 is not a valid compute share (expected 1..100; 100 or unset = no limit)");
    }
    *percent = v;
    return HK_OK;
}

/* ---------------------------------------------------------------------------------------------
   UUIDs                                                                                        */

static char lower(char c) { return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c; }

/* A device-kind word before the UUID proper ("KIND-xxxxxxxx-..."): 1..8 letters, one of them not
   a hex digit (so a UUID's own first group is never taken for it), then '-'. Returns what follows. */
static const char *skip_kind_prefix(const char *s) {
    size_t i = 0;
    int word = 0;
    for (; i < 8 && lower(s[i]) >= 'a' && lower(s[i]) <= 'z'; i++) word |= lower(s[i]) > 'f';
    return (word && s[i] == '-') ? s + i + 1 : s;
}

int hk_uuid_equal(const char *a, const char *b) {
    if (a == NULL || b == NULL || *a == '\0' || *b == '\0') return 0;
    a = skip_kind_prefix(a);
    b = skip_kind_prefix(b);
    for (; *a && *b; a++, b++) {
        if (lower(*a) != lower(*b)) return 0;
    }
    return *a == *b;
}
