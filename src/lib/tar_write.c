/*
 * tar_write.c - tar member headers for `larder pack`'s tar shards (see
 * tar.h): one ustar block when the name and size fit it, else a PAX
 * header carrying both before it.  tar.c parses what this writes.
 */
#include "tar.h"

#include <stdio.h>

static void put_octal(uint8_t *field, size_t width, uint64_t value)
{
    /* width-1 octal digits and a NUL */
    for (size_t i = width - 1; i-- > 0;) {
        field[i] = (uint8_t)('0' + (value & 7));
        value >>= 3;
    }
    field[width - 1] = '\0';
}

static void ustar_block(uint8_t b[LARDER__TAR_BLOCK], const char *name, uint64_t size, char type)
{
    memset(b, 0, LARDER__TAR_BLOCK);
    size_t length = strlen(name);
    if (length <= 100) {
        memcpy(b, name, length);
    } else {
        /* split at a '/' so the prefix fits 155 and the rest 100 */
        const char *split = NULL;
        for (const char *p = name + length - 1; p > name; p--)
            if (*p == '/' && (size_t)(p - name) <= 155 && length - (size_t)(p - name) - 1 <= 100) {
                split = p;
                break;
            }
        if (split) {
            memcpy(b + 345, name, (size_t)(split - name));
            memcpy(b, split + 1, length - (size_t)(split - name) - 1);
        } else {
            memcpy(b, name + length - 100, 100); /* PAX carries the real name */
        }
    }
    put_octal(b + 100, 8, 0644);
    put_octal(b + 108, 8, 0);
    put_octal(b + 116, 8, 0);
    if (size < (UINT64_C(1) << 33)) {
        put_octal(b + 124, 12, size);
    } else {
        b[124] = 0x80;
        for (int i = 11; i >= 1; i--, size >>= 8)
            b[124 + i] = (uint8_t)size;
    }
    put_octal(b + 136, 12, 0);
    b[156] = (uint8_t)type;
    memcpy(b + 257,
           "ustar\0"
           "00",
           8);
    memset(b + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < LARDER__TAR_BLOCK; i++)
        sum += b[i];
    put_octal(b + 148, 7, sum);
    b[155] = ' ';
}

static bool fits_ustar(const char *name, uint64_t size)
{
    size_t length = strlen(name);
    if (size >= (UINT64_C(1) << 33)) return false;
    if (length <= 100) return true;
    for (const char *p = name + length - 1; p > name; p--)
        if (*p == '/' && (size_t)(p - name) <= 155 && length - (size_t)(p - name) - 1 <= 100)
            return true;
    return false;
}

/* One PAX record "LEN KEY=VALUE\n"; its length counts its own digits. */
static size_t pax_record(char *out, const char *key, const char *value)
{
    size_t body = 1 + strlen(key) + 1 + strlen(value) + 1;
    size_t total = body + 1;
    while (total != body + (size_t)snprintf(NULL, 0, "%zu", total))
        total = body + (size_t)snprintf(NULL, 0, "%zu", total);
    if (out) sprintf(out, "%zu %s=%s\n", total, key, value);
    return total;
}

size_t larder__tar_member_header_size(const char *name, uint64_t size)
{
    if (fits_ustar(name, size)) return LARDER__TAR_BLOCK;
    char number[32];
    snprintf(number, sizeof number, "%llu", (unsigned long long)size);
    size_t pax = pax_record(NULL, "path", name) + pax_record(NULL, "size", number);
    return 2 * LARDER__TAR_BLOCK + pax + larder__tar_padding(pax);
}

int larder__tar_member_header(uint8_t *out, size_t capacity, const char *name, uint64_t size)
{
    size_t need = larder__tar_member_header_size(name, size);
    if (need > capacity || strlen(name) >= LARDER__TAR_MAX_NAME)
        return larder__fail(LARDER_EUSAGE, "member name '%.100s...' is too long", name);
    if (need == LARDER__TAR_BLOCK) {
        ustar_block(out, name, size, '0');
        return LARDER__TAR_BLOCK;
    }
    char number[32];
    snprintf(number, sizeof number, "%llu", (unsigned long long)size);
    uint8_t *data = out + LARDER__TAR_BLOCK;
    size_t pax = pax_record((char *)data, "path", name);
    pax += pax_record((char *)data + pax, "size", number);
    memset(data + pax, 0, larder__tar_padding(pax));
    ustar_block(out, "././@PaxHeader", pax, 'x');
    ustar_block(out + need - LARDER__TAR_BLOCK, name, size, '0');
    return (int)need;
}
