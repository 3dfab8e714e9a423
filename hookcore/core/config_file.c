/* config_file.c -- finding and reading a hook library's config file (the only config I/O).
 *
 * The file is HK_CONFIG_ROOT/<stem>/config, written by the node's DRA driver into the claim's
 * directory and mounted into the container. Reading it is one open + fstat + read; a missing
 * file (or directory) means "no config file", anything else that goes wrong fails closed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

static int stem_ok(const char *stem) {
    size_t n = stem ? strlen(stem) : 0;
    if (n == 0 || n > 32) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = stem[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return 0;
    }
    return 1;
}

int hk_config_file_path(const char *stem, char *out, size_t n) {
    if (out == NULL || n == 0) return HK_EINVAL;
    out[0] = '\0';
    if (!stem_ok(stem)) return HK_EINVAL;
    int len = snprintf(out, n, "%s/%s/config", HK_CONFIG_ROOT, stem);
    if (len < 0 || (size_t)len >= n) {
        out[0] = '\0';
        return HK_EINVAL;
    }
    return HK_OK;
}

int hk_config_read_file(const char *path, char **text, char *err, size_t errlen) {
    if (text) *text = NULL;
    if (path == NULL || text == NULL) {
        hk__errf(err, errlen, "hk_config_read_file: NULL argument");
        return HK_EINVAL;
    }
    int fd;
    do { fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY); } while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR) return HK_ENOENT;
        hk__errf(err, errlen, "config file %s exists but cannot be read: %s", path, strerror(errno));
        return HK_EFAILCLOSED;
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        hk__errf(err, errlen, "config file %s is not a regular file", path);
        close(fd);
        return HK_EFAILCLOSED;
    }
    if (st.st_size > HK_CONFIG_MAX) {
        hk__errf(err, errlen, "config file %s is too large (%lld bytes, at most %d)", path, (long long)st.st_size,
                 HK_CONFIG_MAX);
        close(fd);
        return HK_EFAILCLOSED;
    }
    char *buf = malloc(HK_CONFIG_MAX + 1);
    if (buf == NULL) {
        hk__errf(err, errlen, "out of host memory reading config file %s", path);
        close(fd);
        return HK_EFAILCLOSED;
    }
    size_t len = 0;
    for (;;) { /* read to EOF: the file may grow between fstat and read */
        ssize_t r = read(fd, buf + len, HK_CONFIG_MAX + 1 - len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            hk__errf(err, errlen, "config file %s cannot be read: %s", path, strerror(errno));
            free(buf);
            close(fd);
            return HK_EFAILCLOSED;
        }
        if (r == 0) break;
        len += (size_t)r;
        if (len > HK_CONFIG_MAX) {
            hk__errf(err, errlen, "config file %s is too large (more than %d bytes)", path, HK_CONFIG_MAX);
            free(buf);
            close(fd);
            return HK_EFAILCLOSED;
        }
    }
    close(fd);
    if (memchr(buf, '\0', len) != NULL) {
        hk__errf(err, errlen, "config file %s contains a NUL byte (not a text file)", path);
        free(buf);
        return HK_EFAILCLOSED;
    }
    buf[len] = '\0';
    *text = buf;
    return HK_OK;
}
