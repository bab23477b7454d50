/* Request size limits (limits.h): one checker per shape of parameter, so
 * every method refuses the same oversized input with the same message. */
#include <errno.h>
#include <string.h>
#include "libcore/util.h"
#include "sandboxd/limits.h"
#include "sandboxd/text.h"

const limit_map limit_env = {
        .max_entries = LIMIT_ENV_COUNT,
        .max_name = LIMIT_ENV_NAME_BYTES,
        .max_value = LIMIT_ENV_VALUE_BYTES,
        .max_total = LIMIT_ENV_BYTES,
};

const limit_map limit_tags = {
        .max_entries = LIMIT_TAG_COUNT,
        .max_name = LIMIT_TAG_NAME_BYTES,
        .max_value = LIMIT_TAG_VALUE_BYTES,
        .max_total = 0,  /* bounded by count x (name + value) */
};

size_t limit_json_len(const char *s) {
        size_t n = 0;
        for (const unsigned char *p = (const unsigned char *)s; p && *p; p++) {
                if (*p == '"' || *p == '\\' || *p == '\b' || *p == '\f' || *p == '\n' || *p == '\r' || *p == '\t')
                        n += 2;
                else if (*p < 0x20)
                        n += 6;
                else
                        n++;
        }
        return n;
}

int limit_check_string(const char *s, const char *field, size_t max, sb_error **ret_err) {
        size_t n = limit_json_len(s);
        if (n > max)
                return sb_error_set(ret_err, -E2BIG, NULL, field, "%s: %zu bytes is over the limit of %zu bytes", field,
                                    n, max);
        return 0;
}

int limit_check_map(const cJSON *map, const char *field, const limit_map *lim, sb_error **ret_err) {
        unsigned count = 0;
        size_t total = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, map) {
                char q[TEXT_QUOTE_BUF], path[TEXT_QUOTE_BUF + 64];
                snprintf(path, sizeof(path), "%s.%s", field, text_quote(it->string, q));
                size_t nlen = strlen(it->string);
                if (nlen == 0 || nlen > lim->max_name || strchr(it->string, '='))
                        return sb_error_set(ret_err, -EINVAL, NULL, path,
                                            "%s: names must be 1-%zu bytes without '='", path, lim->max_name);
                if (!cJSON_IsString(it))
                        return sb_error_set(ret_err, -EINVAL, NULL, path, "%s: must be a string", path);
                size_t vlen = limit_json_len(it->valuestring);
                if (vlen > lim->max_value)
                        return sb_error_set(ret_err, -E2BIG, NULL, path,
                                            "%s: the value is %zu bytes, over the limit of %zu bytes", path, vlen,
                                            lim->max_value);
                total += limit_json_len(it->string) + vlen + 1;
                count++;
        }
        if (lim->max_entries && count > lim->max_entries)
                return sb_error_set(ret_err, -E2BIG, NULL, field, "%s: %u entries is over the limit of %u", field, count,
                                    lim->max_entries);
        if (lim->max_total && total > lim->max_total)
                return sb_error_set(ret_err, -E2BIG, NULL, field,
                                    "%s: %zu bytes in all (as name=value) is over the limit of %zu bytes", field, total,
                                    lim->max_total);
        return 0;
}

int limit_check_args(const cJSON *args, const char *field, sb_error **ret_err) {
        size_t total = 0;
        int i = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, args) {
                if (!cJSON_IsString(it)) {
                        char f[48];
                        snprintf(f, sizeof(f), "%s[%d]", field, i);
                        return sb_error_set(ret_err, -EINVAL, NULL, f, "%s: must be a string", f);
                }
                total += limit_json_len(it->valuestring) + 1;
                i++;
        }
        if (i > LIMIT_ARGS_COUNT)
                return sb_error_set(ret_err, -E2BIG, NULL, field, "%s: %d arguments is over the limit of %d", field, i,
                                    LIMIT_ARGS_COUNT);
        if (total > LIMIT_ARGS_BYTES)
                return sb_error_set(ret_err, -E2BIG, NULL, field,
                                    "%s: %zu bytes in all is over the limit of %d bytes", field, total,
                                    LIMIT_ARGS_BYTES);
        return 0;
}
