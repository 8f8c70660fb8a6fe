/*
 * tar.c - tar header parsing, and the push scanner that turns a
 * WebDataset tar into samples (see tar.h).  Writing member headers is
 * tar_write.c.
 *
 * Sample ranges: a sample starts at the first header block of its first
 * member (PAX and GNU long-name blocks included) and runs up to the first
 * header block of the next sample, or the end-of-archive marker.  Entries
 * that are not sample members (directories, global PAX headers, files
 * without an extension) fall inside the preceding sample's range.  So in
 * an archive of sample members only, the samples tile it exactly.
 */
#include "tar.h"
#include "npy.h"

#include <stdio.h>

enum { ST_HEADER, ST_META_DATA, ST_PAD, ST_MEMBER_DATA, ST_SKIP_DATA, ST_END };

#define PENDING_CAP (LARDER__TAR_MAX_PAX + 3 * LARDER__TAR_MAX_NAME + 8 * LARDER__TAR_BLOCK)
#define NAMES_CAP (64 * 1024)
#define NPY_HEAD 4096

struct larder__tar_scanner {
    const char *name;
    larder__tar_sample_fn on_sample;
    larder__tar_skip_fn on_skip;
    void *userdata;
    uint64_t offset; /* bytes consumed */
    int state;
    uint64_t remaining;  /* bytes left in the current data or padding run */
    bool pad_to_pending; /* padding after metadata belongs to the pending run */
    uint8_t block[LARDER__TAR_BLOCK];
    size_t block_used;
    uint32_t zero_blocks;
    uint64_t zero_start;

    /* header blocks and metadata not yet assigned to a sample */
    uint8_t pending[PENDING_CAP];
    size_t pending_used;
    uint64_t pending_start;
    size_t meta_data_pos;
    uint64_t meta_length;
    char meta_type;
    char next_name[LARDER__TAR_MAX_NAME];
    bool have_next_name;
    uint64_t next_size;
    bool have_next_size;

    /* the member being read */
    char member_name[LARDER__TAR_MAX_NAME];
    uint64_t member_header_offset;
    uint64_t member_size;
    uint8_t head[NPY_HEAD];
    size_t head_used;
    bool capture;

    /* the sample being assembled */
    bool in_sample;
    uint64_t sample_start;
    char key[LARDER__TAR_MAX_NAME];
    size_t key_length;
    XXH3_state_t hash;
    struct larder__tar_field fields[LARDER__TAR_MAX_FIELDS];
    uint32_t num_fields;
    char names[NAMES_CAP];
    size_t names_used;
};

size_t larder__tar_scanner_size(void)
{
    return sizeof(struct larder__tar_scanner);
}

/* ---- headers ----------------------------------------------------------- */

int larder__tar_zero_block(const uint8_t block[LARDER__TAR_BLOCK])
{
    for (int i = 0; i < LARDER__TAR_BLOCK; i++)
        if (block[i]) return 0;
    return 1;
}

/* Parse an octal field (leading spaces, digits, then NUL or space). */
static bool parse_octal(const uint8_t *field, size_t width, uint64_t *out)
{
    size_t i = 0;
    uint64_t v = 0;
    while (i < width && field[i] == ' ')
        i++;
    size_t digits = 0;
    for (; i < width && field[i] >= '0' && field[i] <= '7'; i++, digits++) {
        if (v >> 61) return false;
        v = v << 3 | (uint64_t)(field[i] - '0');
    }
    for (; i < width; i++)
        if (field[i] != ' ' && field[i] != '\0') return false;
    *out = v;
    return digits > 0;
}

static bool parse_size(const uint8_t *field, uint64_t *out)
{
    if (field[0] & 0x80) { /* GNU base-256: big-endian, positive only */
        if (field[0] != 0x80) return false;
        uint64_t v = 0;
        for (int i = 1; i < 12; i++) {
            if (v >> 56) return false;
            v = v << 8 | field[i];
        }
        *out = v;
        return true;
    }
    return parse_octal(field, 12, out);
}

int larder__tar_parse_header(const uint8_t b[LARDER__TAR_BLOCK], struct larder__tar_header *out)
{
    uint64_t stored;
    if (!parse_octal(b + 148, 8, &stored))
        return larder__fail(LARDER_EBADTAR, "header checksum field is not octal");
    uint64_t sum = 0;
    int64_t signed_sum = 0;
    for (int i = 0; i < LARDER__TAR_BLOCK; i++) {
        uint8_t c = (i >= 148 && i < 156) ? ' ' : b[i];
        sum += c;
        signed_sum += (int8_t)c;
    }
    if (stored != sum && (int64_t)stored != signed_sum)
        return larder__fail(LARDER_EBADTAR, "header checksum mismatch (stored %llo, computed %llo)",
                            (unsigned long long)stored, (unsigned long long)sum);
    if (!parse_size(b + 124, &out->size))
        return larder__fail(LARDER_EBADTAR, "size field is not a number");
    out->type = b[156] ? (char)b[156] : '0';
    size_t name_length = strnlen((const char *)b, 100);
    bool posix = memcmp(b + 257, "ustar\0", 6) == 0;
    size_t prefix_length = posix ? strnlen((const char *)b + 345, 155) : 0;
    size_t at = 0;
    if (prefix_length) {
        memcpy(out->name, b + 345, prefix_length);
        out->name[prefix_length] = '/';
        at = prefix_length + 1;
    }
    memcpy(out->name + at, b, name_length);
    out->name[at + name_length] = '\0';
    return 0;
}

int larder__check_member_name(const char *name)
{
    if (!name[0]) return larder__fail(LARDER_EUNSAFE, "empty member name");
    if (name[0] == '/') return larder__fail(LARDER_EUNSAFE, "absolute member name '%s'", name);
    for (const char *p = name; *p;) {
        const char *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        if (n == 2 && p[0] == '.' && p[1] == '.')
            return larder__fail(LARDER_EUNSAFE, "member name '%s' has a '..' component", name);
        p += n + (slash ? 1 : 0);
    }
    return 0;
}

bool larder__split_key(const char *path, size_t *key_length, const char **ext)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strchr(base, '.');
    if (!dot || dot == base || !dot[1]) return false;
    *key_length = (size_t)(dot - path);
    *ext = dot + 1;
    return true;
}

/* ---- scanner ----------------------------------------------------------- */

void larder__tar_scanner_init(struct larder__tar_scanner *s, const char *name,
                              larder__tar_sample_fn on_sample, larder__tar_skip_fn on_skip,
                              void *userdata)
{
    s->name = name;
    s->on_sample = on_sample;
    s->on_skip = on_skip;
    s->userdata = userdata;
    s->offset = 0;
    s->state = ST_HEADER;
    s->remaining = 0;
    s->block_used = 0;
    s->zero_blocks = 0;
    s->pending_used = 0;
    s->have_next_name = s->have_next_size = false;
    s->in_sample = false;
    s->num_fields = 0;
    s->names_used = 0;
    s->capture = false;
}

uint64_t larder__tar_scanner_offset(const struct larder__tar_scanner *s)
{
    return s->offset;
}

static int bad(struct larder__tar_scanner *s, int code, uint64_t at, const char *what)
{
    return larder__fail(code, "%s: entry at offset %llu: %s", s->name, (unsigned long long)at,
                        what);
}

static int pending_append(struct larder__tar_scanner *s, const void *data, size_t length,
                          uint64_t at)
{
    if (length > PENDING_CAP - s->pending_used)
        return bad(s, LARDER_EBADTAR, at, "too much metadata before a member");
    if (s->pending_used == 0) s->pending_start = at;
    memcpy(s->pending + s->pending_used, data, length);
    s->pending_used += length;
    return 0;
}

/* Hand the pending run to the open sample (or drop it outside any sample). */
static void pending_flush(struct larder__tar_scanner *s)
{
    if (s->in_sample && s->pending_used) XXH3_64bits_update(&s->hash, s->pending, s->pending_used);
    s->pending_used = 0;
}

static int emit_sample(struct larder__tar_scanner *s, uint64_t end)
{
    if (!s->in_sample) return 0;
    s->in_sample = false;
    struct larder__tar_sample sample = {
        .offset = s->sample_start,
        .length = end - s->sample_start,
        .checksum = XXH3_64bits_digest(&s->hash),
        .key = s->key,
        .key_length = s->key_length,
        .num_fields = s->num_fields,
        .fields = s->fields,
    };
    for (uint32_t i = 0; i < s->num_fields; i++)
        s->fields[i].field.offset -= s->sample_start;
    int rc = s->on_sample ? s->on_sample(s->userdata, &sample) : 0;
    s->num_fields = 0;
    s->names_used = 0;
    return rc;
}

/* Parse PAX records "LEN KEY=VALUE\n" for path and size. */
static int parse_pax(struct larder__tar_scanner *s, const char *p, size_t length, uint64_t at)
{
    while (length > 0) {
        size_t record = 0, i = 0;
        while (i < length && p[i] >= '0' && p[i] <= '9' && record < length) {
            record = record * 10 + (size_t)(p[i] - '0');
            i++;
        }
        if (i == 0 || i >= length || p[i] != ' ' || record > length || record < i + 3 ||
            p[record - 1] != '\n')
            return bad(s, LARDER_EBADTAR, at, "malformed PAX record");
        const char *kv = p + i + 1, *end = p + record - 1;
        const char *eq = memchr(kv, '=', (size_t)(end - kv));
        if (!eq) return bad(s, LARDER_EBADTAR, at, "PAX record without '='");
        size_t key_length = (size_t)(eq - kv), value_length = (size_t)(end - eq - 1);
        const char *value = eq + 1;
        if (key_length == 4 && memcmp(kv, "path", 4) == 0) {
            if (value_length == 0 || value_length >= LARDER__TAR_MAX_NAME ||
                memchr(value, '\0', value_length))
                return bad(s, LARDER_EBADTAR, at, "PAX path is empty, too long or has a NUL");
            memcpy(s->next_name, value, value_length);
            s->next_name[value_length] = '\0';
            s->have_next_name = true;
        } else if (key_length == 4 && memcmp(kv, "size", 4) == 0) {
            uint64_t v = 0;
            if (value_length == 0 || value_length > 19)
                return bad(s, LARDER_EBADTAR, at, "PAX size is not a number");
            for (size_t k = 0; k < value_length; k++) {
                if (value[k] < '0' || value[k] > '9')
                    return bad(s, LARDER_EBADTAR, at, "PAX size is not a number");
                v = v * 10 + (uint64_t)(value[k] - '0');
            }
            s->next_size = v;
            s->have_next_size = true;
        }
        p += record;
        length -= record;
    }
    return 0;
}

static int finish_meta(struct larder__tar_scanner *s)
{
    const char *data = (const char *)s->pending + s->meta_data_pos;
    uint64_t at = s->offset - s->meta_length;
    if (s->meta_type == 'L') {
        size_t n = strnlen(data, (size_t)s->meta_length);
        if (n == 0) return bad(s, LARDER_EBADTAR, at, "empty GNU long name");
        memcpy(s->next_name, data, n);
        s->next_name[n] = '\0';
        s->have_next_name = true;
    } else if (s->meta_type == 'x') {
        int rc = parse_pax(s, data, (size_t)s->meta_length, at);
        if (rc < 0) return rc;
    }
    return 0;
}

/* A regular member's header at `at`, data following. */
static int start_member(struct larder__tar_scanner *s, const struct larder__tar_header *h,
                        uint64_t at)
{
    const char *name = s->have_next_name ? s->next_name : h->name;
    uint64_t size = s->have_next_size ? s->next_size : h->size;
    s->have_next_name = s->have_next_size = false;
    const char *shown = name;
    while (shown[0] == '.' && shown[1] == '/')
        shown += 2;
    size_t name_length = strlen(shown);
    memcpy(s->member_name, shown, name_length + 1);
    s->member_header_offset = at;
    int rc = larder__check_member_name(s->member_name);
    if (rc < 0)
        return larder__fail_context(rc, "%s: entry at offset %llu", s->name,
                                    (unsigned long long)at);

    size_t key_length;
    const char *ext;
    s->state = ST_MEMBER_DATA;
    s->remaining = size;
    s->member_size = size;
    s->capture = false;
    if (!larder__split_key(s->member_name, &key_length, &ext)) {
        if (s->on_skip) s->on_skip(s->userdata, s->member_name, at);
        pending_flush(s);
        return 0;
    }
    if (!s->in_sample || key_length != s->key_length ||
        memcmp(s->key, s->member_name, key_length) != 0) {
        uint64_t start = s->pending_used ? s->pending_start : at;
        if ((rc = emit_sample(s, start)) < 0) return rc;
        s->in_sample = true;
        s->sample_start = start;
        memcpy(s->key, s->member_name, key_length);
        s->key[key_length] = '\0';
        s->key_length = key_length;
        XXH3_64bits_reset(&s->hash);
    }
    pending_flush(s);
    size_t ext_length = strlen(ext);
    if (s->num_fields == LARDER__TAR_MAX_FIELDS || ext_length + 1 > NAMES_CAP - s->names_used)
        return bad(s, LARDER_EUNSUPPORTED, at, "too many members in one sample");
    for (uint32_t i = 0; i < s->num_fields; i++)
        if (strcmp(s->fields[i].ext, ext) == 0)
            return larder__fail(LARDER_EDUPKEY,
                                "%s: entry at offset %llu: member '%s' repeats "
                                "field '%s' of sample '%s'",
                                s->name, (unsigned long long)at, s->member_name, ext, s->key);
    char *stored = s->names + s->names_used;
    memcpy(stored, ext, ext_length + 1);
    s->names_used += ext_length + 1;
    struct larder__tar_field *f = &s->fields[s->num_fields++];
    memset(f, 0, sizeof *f);
    f->ext = stored;
    f->member_offset = s->offset;
    f->member_length = size;
    f->field.name = stored;
    f->field.offset = s->offset; /* made relative in emit_sample */
    f->field.length = size;
    s->capture = larder__npy_bare_length(stored) != 0;
    s->head_used = 0;
    return 0;
}

/* The member's data is complete: decode an .npy header if it has one. */
static void finish_member(struct larder__tar_scanner *s)
{
    if (!s->capture) return;
    struct larder__tar_field *f = &s->fields[s->num_fields - 1];
    struct larder__npy npy;
    if (larder__npy_parse(s->head, s->head_used, &npy) == 0 &&
        npy.data_offset + npy.data_length == f->member_length) {
        /* "image.npy" becomes the array field "image", in a stable string */
        const char *stored = f->ext;
        size_t n = larder__npy_bare_length(stored);
        char *bare = s->names + s->names_used;
        if (n + 1 <= NAMES_CAP - s->names_used) {
            memcpy(bare, stored, n);
            bare[n] = '\0';
            s->names_used += n + 1;
            f->field.name = bare;
            f->field.offset += npy.data_offset;
            f->field.length = npy.data_length;
            f->field.dtype = npy.dtype;
            f->field.ndim = npy.ndim;
            memcpy(f->field.shape, npy.shape, sizeof npy.shape);
        }
    }
    s->capture = false;
}

static int on_header_block(struct larder__tar_scanner *s)
{
    uint64_t at = s->offset - LARDER__TAR_BLOCK;
    if (larder__tar_zero_block(s->block)) {
        if (s->pending_used)
            return bad(s, LARDER_EBADTAR, at, "archive ends right after a metadata header");
        if (s->zero_blocks++ == 0) s->zero_start = at;
        if (s->zero_blocks == 2) {
            s->state = ST_END;
            return emit_sample(s, s->zero_start);
        }
        return 0;
    }
    if (s->zero_blocks)
        return bad(s, LARDER_EBADTAR, s->zero_start, "lone zero block inside the archive");
    int rc = pending_append(s, s->block, LARDER__TAR_BLOCK, at);
    if (rc < 0) return rc;
    struct larder__tar_header h;
    if ((rc = larder__tar_parse_header(s->block, &h)) < 0)
        return larder__fail_context(rc, "%s: header at offset %llu", s->name,
                                    (unsigned long long)at);
    switch (h.type) {
    case 'x':
    case 'L':
    case 'K':
        if (h.size > (h.type == 'x' ? LARDER__TAR_MAX_PAX : LARDER__TAR_MAX_NAME - 1))
            return bad(s, LARDER_EBADTAR, at, "metadata header too large");
        s->state = ST_META_DATA;
        s->meta_type = h.type;
        s->meta_length = h.size;
        s->meta_data_pos = s->pending_used;
        s->remaining = h.size;
        return 0;
    case '0':
    case '7':
        return start_member(s, &h, at);
    case '5':
    case 'g':
        /* not a sample member: belongs to the open sample's range */
        s->have_next_name = s->have_next_size = false;
        pending_flush(s);
        s->state = ST_SKIP_DATA;
        s->remaining = h.size + larder__tar_padding(h.size);
        if (h.type == '5') s->remaining = 0; /* directories carry no data */
        if (s->remaining == 0) s->state = ST_HEADER;
        return 0;
    case '1':
    case '2':
    case '3':
    case '4':
    case '6':
        return larder__fail(LARDER_EUNSAFE,
                            "%s: entry at offset %llu: '%s' is a link or device (type '%c'); "
                            "only regular files can be samples",
                            s->name, (unsigned long long)at,
                            s->have_next_name ? s->next_name : h.name, h.type);
    default:
        return larder__fail(LARDER_EUNSAFE, "%s: entry at offset %llu: unsupported type '%c'",
                            s->name, (unsigned long long)at, h.type);
    }
}

/* The current data or padding run is complete: move to what follows it. */
static int end_run(struct larder__tar_scanner *s)
{
    int rc;
    switch (s->state) {
    case ST_META_DATA:
        if ((rc = finish_meta(s)) < 0) return rc;
        s->state = ST_PAD;
        s->pad_to_pending = true;
        s->remaining = larder__tar_padding(s->meta_length);
        break;
    case ST_MEMBER_DATA:
        finish_member(s);
        s->state = ST_PAD;
        s->pad_to_pending = false;
        s->remaining = larder__tar_padding(s->member_size);
        break;
    default:
        s->state = ST_HEADER;
        break;
    }
    return 0;
}

/* Advance through runs that need no input (empty members, no padding). */
static int settle(struct larder__tar_scanner *s)
{
    while (s->state != ST_HEADER && s->state != ST_END && s->remaining == 0) {
        int rc = end_run(s);
        if (rc < 0) return rc;
    }
    return 0;
}

int larder__tar_scanner_feed(struct larder__tar_scanner *s, const void *data, size_t length)
{
    const uint8_t *p = data;
    int rc;
    while (length > 0) {
        size_t n;
        if (s->state == ST_END) {
            s->offset += length;
            return 0;
        }
        if (s->state == ST_HEADER) {
            n = LARDER__TAR_BLOCK - s->block_used;
            if (n > length) n = length;
            memcpy(s->block + s->block_used, p, n);
            s->block_used += n;
            s->offset += n, p += n, length -= n;
            if (s->block_used == LARDER__TAR_BLOCK) {
                s->block_used = 0;
                if ((rc = on_header_block(s)) < 0 || (rc = settle(s)) < 0) return rc;
            }
            continue;
        }
        n = s->remaining < length ? (size_t)s->remaining : length;
        switch (s->state) {
        case ST_META_DATA:
            if ((rc = pending_append(s, p, n, s->offset)) < 0) return rc;
            break;
        case ST_PAD:
            if (s->pad_to_pending) {
                if ((rc = pending_append(s, p, n, s->offset)) < 0) return rc;
            } else if (s->in_sample) {
                XXH3_64bits_update(&s->hash, p, n);
            }
            break;
        case ST_MEMBER_DATA:
            if (s->in_sample) XXH3_64bits_update(&s->hash, p, n);
            if (s->capture && s->head_used < NPY_HEAD) {
                size_t c = NPY_HEAD - s->head_used < n ? NPY_HEAD - s->head_used : n;
                memcpy(s->head + s->head_used, p, c);
                s->head_used += c;
            }
            break;
        default: /* ST_SKIP_DATA */
            if (s->in_sample) XXH3_64bits_update(&s->hash, p, n);
            break;
        }
        s->offset += n, p += n, length -= n;
        s->remaining -= n;
        if ((rc = settle(s)) < 0) return rc;
    }
    return 0;
}

int larder__tar_scanner_finish(struct larder__tar_scanner *s)
{
    if (s->state == ST_END) return 0;
    if (s->state == ST_HEADER && s->block_used == 0) {
        if (s->pending_used)
            return bad(s, LARDER_ETRUNCATED, s->pending_start,
                       "archive ends right after a metadata header");
        return emit_sample(s, s->zero_blocks ? s->zero_start : s->offset);
    }
    if (s->state == ST_HEADER)
        return larder__fail(LARDER_ETRUNCATED, "%s: archive ends inside a header block at %llu",
                            s->name, (unsigned long long)(s->offset - s->block_used));
    if (s->state == ST_MEMBER_DATA)
        return larder__fail(LARDER_ETRUNCATED,
                            "%s: member '%s' (header at offset %llu) extends %llu bytes past the "
                            "end of the archive (%llu bytes)",
                            s->name, s->member_name, (unsigned long long)s->member_header_offset,
                            (unsigned long long)s->remaining, (unsigned long long)s->offset);
    return larder__fail(LARDER_ETRUNCATED, "%s: archive ends %llu bytes early (at %llu)", s->name,
                        (unsigned long long)s->remaining, (unsigned long long)s->offset);
}
