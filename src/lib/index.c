/*
 * index.c - reading and writing index files (layout in docs/format.md).
 *
 * The reader never trusts the image: the header and the section bounds
 * are checked once at parse time, and every record is checked when it is
 * handed out, so a corrupt index yields LARDER_EBADINDEX naming the
 * record instead of a wild read.  Lookups are O(1): sample records are
 * fixed-width, and keys go through an open-addressing table of slots.
 */
#include "index.h"
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <xxhash.h>

/* Header field offsets. */
enum {
    H_MAGIC = 0,
    H_VERSION = 8,
    H_HEADER_SIZE = 12,
    H_ID = 16,
    H_NUM_SHARDS = 32,
    H_NUM_SAMPLES = 40,
    H_NUM_FIELDS = 48,
    H_NUM_DIMS = 56,
    H_NUM_KEY_SLOTS = 64,
    H_STRINGS_SIZE = 72,
    H_TOTAL_BYTES = 80,
    H_FILE_SIZE = 88,
    H_BLOCK_SIZE = 96,
    H_FLAGS = 100,
    H_BASE = 104, /* version 2, with LARDER__INDEX_FLAG_BASE: string reference */
    H_RESERVED = 112,
    H_CHECKSUM = 120,
};

/* A key slot: 0 is empty, else (tag << 40) | (sample id + 1). */
#define SLOT_ID_BITS 40
#define SLOT_ID_MASK ((UINT64_C(1) << SLOT_ID_BITS) - 1)
#define MAX_SAMPLES (SLOT_ID_MASK - 1)

uint64_t larder__key_hash(const char *key, size_t length)
{
    return XXH3_64bits(key, length);
}

static uint64_t slot_tag(uint64_t hash)
{
    return hash >> SLOT_ID_BITS;
}

/* Slots for n keys: a power of two with load at most 3/4. */
static uint64_t key_slots_for(uint64_t n)
{
    uint64_t slots = 16;
    while (slots - slots / 4 < n + 1)
        slots *= 2;
    return slots;
}

struct layout {
    uint64_t shards, samples, fields, dims, key_slots, strings, end;
};

/* Section offsets from the counts; false on overflow. */
static bool compute_layout(uint64_t num_shards, uint64_t num_samples, uint64_t num_fields,
                           uint64_t num_dims, uint64_t num_key_slots, uint64_t strings_size,
                           struct layout *l)
{
    uint64_t bytes;
    l->shards = LARDER__INDEX_HEADER_SIZE;
    if (!larder__mul_ok(num_shards, LARDER__INDEX_SHARD_SIZE, &bytes) ||
        !larder__add_ok(l->shards, bytes, &l->samples))
        return false;
    if (!larder__mul_ok(num_samples, LARDER__INDEX_SAMPLE_SIZE, &bytes) ||
        !larder__add_ok(l->samples, bytes, &l->fields))
        return false;
    if (!larder__mul_ok(num_fields, LARDER__INDEX_FIELD_SIZE, &bytes) ||
        !larder__add_ok(l->fields, bytes, &l->dims))
        return false;
    if (!larder__mul_ok(num_dims, 8, &bytes) || !larder__add_ok(l->dims, bytes, &l->key_slots))
        return false;
    if (!larder__mul_ok(num_key_slots, 8, &bytes) ||
        !larder__add_ok(l->key_slots, bytes, &l->strings))
        return false;
    return larder__add_ok(l->strings, strings_size, &l->end);
}

/* The content hash: xxh3-128 of the image with the id and header checksum zeroed. */
static XXH128_hash_t content_hash(const uint8_t *image, uint64_t size)
{
    uint8_t header[LARDER__INDEX_HEADER_SIZE];
    memcpy(header, image, sizeof header);
    memset(header + H_ID, 0, 16);
    memset(header + H_CHECKSUM, 0, 8);
    XXH3_state_t state;
    XXH3_128bits_reset(&state);
    XXH3_128bits_update(&state, header, sizeof header);
    XXH3_128bits_update(&state, image + sizeof header, (size_t)(size - sizeof header));
    return XXH3_128bits_digest(&state);
}

/*
 * A string reference: u32 length, bytes, NUL, at `offset` in the string
 * table.  Returns the string or NULL when it does not fit or is not
 * terminated where its length says.
 */
static const char *string_at(const struct larder__index *ix, uint64_t offset)
{
    if (offset > ix->strings_size || ix->strings_size - offset < 5) return NULL;
    uint32_t length = larder__le32(ix->strings + offset);
    if (length > ix->strings_size - offset - 5) return NULL;
    const char *s = (const char *)ix->strings + offset + 4;
    if (s[length] != '\0' || memchr(s, '\0', length)) return NULL;
    return s;
}

int larder__index_parse(struct larder__index *ix, const void *image, uint64_t size,
                        const char *name)
{
    const uint8_t *h = image;
    memset(ix, 0, sizeof *ix);
    ix->name = name;
    if (size < LARDER__INDEX_HEADER_SIZE)
        return larder__fail(LARDER_EBADINDEX, "%s: %llu bytes, too short for an index header", name,
                            (unsigned long long)size);
    if (memcmp(h + H_MAGIC, LARDER__INDEX_MAGIC, 8) != 0)
        return larder__fail(LARDER_EBADINDEX, "%s: bad magic at offset 0: not a larder index",
                            name);
    ix->version = larder__le32(h + H_VERSION);
    if (ix->version < 1 || ix->version > LARDER__INDEX_VERSION)
        return larder__fail(LARDER_EVERSION,
                            "%s: index format version %u at offset %d; this build reads 1 to %d",
                            name, ix->version, H_VERSION, LARDER__INDEX_VERSION);
    if (larder__le32(h + H_HEADER_SIZE) != LARDER__INDEX_HEADER_SIZE)
        return larder__fail(LARDER_EBADINDEX, "%s: header size %u at offset %d, expected %d", name,
                            larder__le32(h + H_HEADER_SIZE), H_HEADER_SIZE,
                            LARDER__INDEX_HEADER_SIZE);
    if (XXH3_64bits(h, H_CHECKSUM) != larder__le64(h + H_CHECKSUM))
        return larder__fail(LARDER_EBADINDEX, "%s: header checksum mismatch (bytes 0-%d)", name,
                            H_CHECKSUM - 1);
    ix->id_low = larder__le64(h + H_ID);
    ix->id_high = larder__le64(h + H_ID + 8);
    ix->num_shards = larder__le64(h + H_NUM_SHARDS);
    ix->num_samples = larder__le64(h + H_NUM_SAMPLES);
    ix->num_fields = larder__le64(h + H_NUM_FIELDS);
    ix->num_dims = larder__le64(h + H_NUM_DIMS);
    ix->num_key_slots = larder__le64(h + H_NUM_KEY_SLOTS);
    ix->strings_size = larder__le64(h + H_STRINGS_SIZE);
    ix->total_bytes = larder__le64(h + H_TOTAL_BYTES);
    ix->block_size = larder__le32(h + H_BLOCK_SIZE);
    uint64_t file_size = larder__le64(h + H_FILE_SIZE);

    struct layout l;
    if (!compute_layout(ix->num_shards, ix->num_samples, ix->num_fields, ix->num_dims,
                        ix->num_key_slots, ix->strings_size, &l))
        return larder__fail(LARDER_EBADINDEX, "%s: header counts overflow 64 bits", name);
    if (l.end != file_size || file_size != size)
        return larder__fail(LARDER_EBADINDEX,
                            "%s: header counts give %llu bytes, header says %llu, file has %llu "
                            "(truncated or corrupt)",
                            name, (unsigned long long)l.end, (unsigned long long)file_size,
                            (unsigned long long)size);
    if (ix->num_samples > MAX_SAMPLES)
        return larder__fail(LARDER_EBADINDEX, "%s: %llu samples is more than larder supports", name,
                            (unsigned long long)ix->num_samples);
    if (ix->num_key_slots & (ix->num_key_slots - 1) || ix->num_key_slots <= ix->num_samples)
        return larder__fail(LARDER_EBADINDEX,
                            "%s: key table of %llu slots for %llu samples (offset %d)", name,
                            (unsigned long long)ix->num_key_slots,
                            (unsigned long long)ix->num_samples, H_NUM_KEY_SLOTS);
    if (ix->block_size < LARDER__MIN_BLOCK_SIZE || ix->block_size > LARDER__MAX_BLOCK_SIZE ||
        ix->block_size & (ix->block_size - 1))
        return larder__fail(
            LARDER_EBADINDEX, "%s: block size %u is not a power of two from %u to %u (offset %d)",
            name, ix->block_size, LARDER__MIN_BLOCK_SIZE, LARDER__MAX_BLOCK_SIZE, H_BLOCK_SIZE);
    uint32_t flags = larder__le32(h + H_FLAGS);
    uint32_t known_flags = ix->version >= 2 ? LARDER__INDEX_FLAG_BASE : 0;
    if (flags & ~known_flags)
        return larder__fail(LARDER_EBADINDEX, "%s: unknown flags %#x at offset %d", name, flags,
                            H_FLAGS);
    ix->image = h;
    ix->image_size = size;
    ix->shards = h + l.shards;
    ix->samples = h + l.samples;
    ix->fields = h + l.fields;
    ix->dims = h + l.dims;
    ix->key_slots = h + l.key_slots;
    ix->strings = h + l.strings;
    if (flags & LARDER__INDEX_FLAG_BASE) {
        ix->base = string_at(ix, larder__le64(h + H_BASE));
        if (!ix->base || !ix->base[0])
            return larder__fail(LARDER_EBADINDEX,
                                "%s: base string offset %llu (offset %d) out of range", name,
                                (unsigned long long)larder__le64(h + H_BASE), H_BASE);
    }
    for (uint64_t i = 0; i < ix->num_shards; i++) {
        struct larder__shard shard;
        int rc = larder__index_shard(ix, i, &shard);
        if (rc < 0) return rc;
        /* bounded one by one, the sum cannot overflow before it is checked */
        ix->shard_bytes += shard.size;
        if (ix->shard_bytes > LARDER__MAX_DATASET_SIZE)
            return larder__fail(LARDER_EBADINDEX,
                                "%s: shards 0-%llu hold more than 2^60 bytes together", name,
                                (unsigned long long)i);
    }
    return 0;
}

int larder__index_shard(const struct larder__index *ix, uint64_t shard, struct larder__shard *out)
{
    if (shard >= ix->num_shards)
        return larder__fail(LARDER_ENOTFOUND, "%s: no shard %llu (index has %llu)", ix->name,
                            (unsigned long long)shard, (unsigned long long)ix->num_shards);
    const uint8_t *r = ix->shards + shard * LARDER__INDEX_SHARD_SIZE;
    uint64_t record_offset = (uint64_t)(r - ix->image);
    out->name = string_at(ix, larder__le64(r));
    out->size = larder__le64(r + 8);
    out->checksum = larder__le64(r + 16);
    out->format = larder__le32(r + 24);
    if (!out->name || !out->name[0])
        return larder__fail(LARDER_EBADINDEX,
                            "%s: shard %llu (offset %llu): name string offset %llu out of range",
                            ix->name, (unsigned long long)shard, (unsigned long long)record_offset,
                            (unsigned long long)larder__le64(r));
    if (out->size > LARDER__MAX_SHARD_SIZE)
        return larder__fail(LARDER_EBADINDEX,
                            "%s: shard %llu ('%s', offset %llu): size %llu is more than larder "
                            "supports (2^56 bytes)",
                            ix->name, (unsigned long long)shard, out->name,
                            (unsigned long long)record_offset, (unsigned long long)out->size);
    if (out->format != LARDER_FORMAT_TAR && out->format != LARDER_FORMAT_FLAT)
        return larder__fail(LARDER_EBADINDEX, "%s: shard %llu (offset %llu): unknown format %u",
                            ix->name, (unsigned long long)shard, (unsigned long long)record_offset,
                            out->format);
    return 0;
}

int larder__index_sample(const struct larder__index *ix, uint64_t id, struct larder__sample *out)
{
    if (id >= ix->num_samples)
        return larder__fail(LARDER_ENOTFOUND, "%s: no sample %llu (index has %llu)", ix->name,
                            (unsigned long long)id, (unsigned long long)ix->num_samples);
    const uint8_t *r = ix->samples + id * LARDER__INDEX_SAMPLE_SIZE;
    unsigned long long at = (unsigned long long)(r - ix->image);
    out->offset = larder__le64(r);
    out->length = larder__le64(r + 8);
    out->checksum = larder__le64(r + 16);
    uint64_t key = larder__le64(r + 24);
    out->field_first = larder__le64(r + 32);
    out->shard = larder__le32(r + 40);
    out->num_fields = larder__le32(r + 44);
    out->key = string_at(ix, key);
    if (!out->key)
        return larder__fail(LARDER_EBADINDEX,
                            "%s: sample %llu (offset %llu): key string offset %llu out of range",
                            ix->name, (unsigned long long)id, at, (unsigned long long)key);
    if (out->shard >= ix->num_shards)
        return larder__fail(LARDER_EBADINDEX, "%s: sample %llu (offset %llu): shard %u of %llu",
                            ix->name, (unsigned long long)id, at, out->shard,
                            (unsigned long long)ix->num_shards);
    uint64_t shard_size = larder__le64(ix->shards + out->shard * LARDER__INDEX_SHARD_SIZE + 8);
    uint64_t end;
    if (!larder__add_ok(out->offset, out->length, &end) || end > shard_size)
        return larder__fail(LARDER_EBADINDEX,
                            "%s: sample %llu (offset %llu): bytes %llu+%llu past the end of "
                            "shard %u (%llu bytes)",
                            ix->name, (unsigned long long)id, at, (unsigned long long)out->offset,
                            (unsigned long long)out->length, out->shard,
                            (unsigned long long)shard_size);
    if (!larder__add_ok(out->field_first, out->num_fields, &end) || end > ix->num_fields)
        return larder__fail(LARDER_EBADINDEX,
                            "%s: sample %llu (offset %llu): fields %llu+%u past the field table "
                            "(%llu)",
                            ix->name, (unsigned long long)id, at,
                            (unsigned long long)out->field_first, out->num_fields,
                            (unsigned long long)ix->num_fields);
    return 0;
}

int larder__index_sample_range(const struct larder__index *ix, uint64_t id,
                               struct larder__sample *out)
{
    if (id >= ix->num_samples)
        return larder__fail(LARDER_ENOTFOUND, "%s: no sample %llu (index has %llu)", ix->name,
                            (unsigned long long)id, (unsigned long long)ix->num_samples);
    const uint8_t *r = ix->samples + id * LARDER__INDEX_SAMPLE_SIZE;
    out->offset = larder__le64(r);
    out->length = larder__le64(r + 8);
    out->checksum = larder__le64(r + 16);
    out->field_first = larder__le64(r + 32);
    out->shard = larder__le32(r + 40);
    out->num_fields = larder__le32(r + 44);
    out->key = NULL;
    /* the checks of larder__index_sample that need nothing outside the
     * record and its shard's size (a key string's own bytes are checked
     * when the key is asked for; reading the bytes does not need it) */
    uint64_t key = larder__le64(r + 24), end, fields_end;
    bool key_fits = key <= ix->strings_size && ix->strings_size - key >= 5;
    if (!key_fits || out->shard >= ix->num_shards ||
        !larder__add_ok(out->offset, out->length, &end) ||
        end > larder__le64(ix->shards + out->shard * LARDER__INDEX_SHARD_SIZE + 8) ||
        !larder__add_ok(out->field_first, out->num_fields, &fields_end) ||
        fields_end > ix->num_fields)
        return larder__index_sample(ix, id, out); /* the full check names the problem */
    return 0;
}

int larder__index_field(const struct larder__index *ix, const struct larder__sample *sample,
                        uint64_t sample_id, uint32_t field, struct larder__field *out)
{
    if (field >= sample->num_fields)
        return larder__fail(LARDER_ENOTFOUND, "%s: sample %llu has no field %u (it has %u)",
                            ix->name, (unsigned long long)sample_id, field, sample->num_fields);
    const uint8_t *r = ix->fields + (sample->field_first + field) * LARDER__INDEX_FIELD_SIZE;
    unsigned long long at = (unsigned long long)(r - ix->image);
    uint64_t name = larder__le64(r);
    memset(out, 0, sizeof *out);
    out->name = string_at(ix, name);
    out->offset = larder__le64(r + 8);
    out->length = larder__le64(r + 16);
    uint64_t dims_first = larder__le64(r + 24);
    out->dtype = r[32];
    out->ndim = r[33];
    if (!out->name)
        return larder__fail(LARDER_EBADINDEX,
                            "%s: sample %llu field %u (offset %llu): name string offset %llu out "
                            "of range",
                            ix->name, (unsigned long long)sample_id, field, at,
                            (unsigned long long)name);
    uint64_t end;
    if (!larder__add_ok(out->offset, out->length, &end) || end > sample->length)
        return larder__fail(LARDER_EBADINDEX,
                            "%s: sample %llu field %u (offset %llu): bytes %llu+%llu past the "
                            "sample's %llu",
                            ix->name, (unsigned long long)sample_id, field, at,
                            (unsigned long long)out->offset, (unsigned long long)out->length,
                            (unsigned long long)sample->length);
    if (out->dtype >= LARDER_DTYPE_COUNT || out->ndim > LARDER_MAX_DIMS ||
        (out->dtype == LARDER_DTYPE_NONE && out->ndim != 0))
        return larder__fail(
            LARDER_EBADINDEX, "%s: sample %llu field %u (offset %llu): bad dtype %d or ndim %u",
            ix->name, (unsigned long long)sample_id, field, at, out->dtype, out->ndim);
    if (out->dtype != LARDER_DTYPE_NONE) {
        if (!larder__add_ok(dims_first, out->ndim, &end) || end > ix->num_dims)
            return larder__fail(LARDER_EBADINDEX,
                                "%s: sample %llu field %u (offset %llu): shape past the dims "
                                "table",
                                ix->name, (unsigned long long)sample_id, field, at);
        uint64_t elements = 1;
        bool ok = true;
        for (uint32_t d = 0; d < out->ndim; d++) {
            out->shape[d] = larder__le64(ix->dims + (dims_first + d) * 8);
            ok = ok && larder__mul_ok(elements, out->shape[d], &elements);
        }
        uint64_t bytes;
        if (!ok || !larder__mul_ok(elements, larder_dtype_size(out->dtype), &bytes) ||
            bytes != out->length)
            return larder__fail(LARDER_EBADINDEX,
                                "%s: sample %llu field %u (offset %llu): shape and dtype do not "
                                "match its %llu bytes",
                                ix->name, (unsigned long long)sample_id, field, at,
                                (unsigned long long)out->length);
    }
    return 0;
}

int64_t larder__index_find_key(const struct larder__index *ix, const char *key, size_t key_length)
{
    if (ix->num_key_slots == 0) return LARDER_ENOTFOUND;
    uint64_t hash = larder__key_hash(key, key_length);
    uint64_t mask = ix->num_key_slots - 1;
    int64_t found = -1;
    /* The table has at least one empty slot (slots > samples), but a
     * corrupt one might not: bound the probe by the table size. */
    for (uint64_t i = 0, slot = hash & mask; i < ix->num_key_slots; i++, slot = (slot + 1) & mask) {
        uint64_t entry = larder__le64(ix->key_slots + slot * 8);
        if (entry == 0) break;
        if (entry >> SLOT_ID_BITS != slot_tag(hash)) continue;
        uint64_t id = (entry & SLOT_ID_MASK) - 1;
        if (id >= ix->num_samples) continue;
        const uint8_t *r = ix->samples + id * LARDER__INDEX_SAMPLE_SIZE;
        const char *candidate = string_at(ix, larder__le64(r + 24));
        if (candidate && strlen(candidate) == key_length &&
            memcmp(candidate, key, key_length) == 0) {
            if (found >= 0)
                return larder__fail(LARDER_EDUPKEY,
                                    "%s: duplicate key '%.*s' in samples %lld and %llu (keys "
                                    "are unique: the index is corrupt)",
                                    ix->name, (int)(key_length > 200 ? 200 : key_length), key,
                                    (long long)found, (unsigned long long)id);
            /* go on to the end of the probe run: a second sample with this
             * key would make every lookup of it ambiguous */
            found = (int64_t)id;
        }
    }
    if (found >= 0) return found;
    return larder__fail(LARDER_ENOTFOUND, "%s: no sample with key '%.*s'", ix->name,
                        (int)(key_length > 200 ? 200 : key_length), key);
}

int larder__index_check_hash(const struct larder__index *ix)
{
    XXH128_hash_t hash = content_hash(ix->image, ix->image_size);
    if (hash.low64 != ix->id_low || hash.high64 != ix->id_high)
        return larder__fail(LARDER_ECHECKSUM,
                            "%s: content hash does not match the dataset id in the header "
                            "(the index was modified or damaged)",
                            ix->name);
    return 0;
}

/* ---- builder ----------------------------------------------------------- */

struct builder_sample {
    uint64_t offset, length, checksum, key, field_first;
    uint32_t shard, num_fields;
};

struct builder_shard {
    uint64_t name, size, checksum;
    uint32_t format;
};

struct larder__index_builder {
    uint32_t block_size;
    struct builder_shard *shards;
    size_t num_shards, cap_shards;
    struct builder_sample *samples;
    size_t num_samples, cap_samples;
    uint8_t *fields; /* encoded records */
    size_t num_fields, cap_fields;
    uint64_t *dims;
    size_t num_dims, cap_dims;
    char *strings;
    size_t strings_size, cap_strings;
    uint64_t total_bytes;
    /* key slots (same encoding as the file) for duplicate detection */
    uint64_t *slots;
    uint64_t num_slots;
    char *base; /* NULL, or the base shard names are relative to (makes a version 2 index) */
    /* interned non-key strings (field and shard names): offset+1, 0 empty */
    uint64_t *names;
    uint64_t num_name_slots, num_names;
};

int larder__index_builder_new(struct larder__index_builder **out, uint32_t block_size)
{
    struct larder__index_builder *b = calloc(1, sizeof *b);
    if (!b) return -ENOMEM;
    if (block_size == 0) block_size = LARDER__DEFAULT_BLOCK_SIZE;
    if (block_size & (block_size - 1)) {
        free(b);
        return larder__fail(LARDER_EUSAGE, "block size %u is not a power of two", block_size);
    }
    b->block_size = block_size;
    b->num_slots = 1024;
    b->slots = calloc(b->num_slots, 8);
    b->num_name_slots = 64;
    b->names = calloc(b->num_name_slots, 8);
    if (!b->slots || !b->names) {
        larder__index_builder_free(b);
        return -ENOMEM;
    }
    *out = b;
    return 0;
}

void larder__index_builder_free(struct larder__index_builder *b)
{
    if (!b) return;
    free(b->shards);
    free(b->samples);
    free(b->fields);
    free(b->dims);
    free(b->strings);
    free(b->slots);
    free(b->names);
    free(b->base);
    free(b);
}

int larder__index_builder_set_base(struct larder__index_builder *b, const char *base)
{
    char *copy = base ? strdup(base) : NULL;
    if (base && (!copy || !base[0] || strlen(base) > UINT32_MAX)) {
        free(copy);
        return copy ? larder__fail(LARDER_EUSAGE, "bad index base '%s'", base) : -ENOMEM;
    }
    free(b->base);
    b->base = copy;
    return 0;
}

/* Append a string to the table; returns its offset or a negative code. */
static int64_t append_string(struct larder__index_builder *b, const char *s, size_t length)
{
    if (length > UINT32_MAX || memchr(s, '\0', length))
        return larder__fail(LARDER_EUSAGE, "string of %zu bytes cannot be stored", length);
    size_t need = b->strings_size + 4 + length + 1;
    if (larder__reserve((void **)&b->strings, &b->cap_strings, need, 1) < 0) return -ENOMEM;
    int64_t offset = (int64_t)b->strings_size;
    larder__put_le32(b->strings + offset, (uint32_t)length);
    memcpy(b->strings + offset + 4, s, length);
    b->strings[offset + 4 + length] = '\0';
    b->strings_size = need;
    return offset;
}

static const char *builder_string(const struct larder__index_builder *b, uint64_t offset,
                                  size_t *length)
{
    *length = larder__le32(b->strings + offset);
    return b->strings + offset + 4;
}

/* Append a name once, sharing the copy between all its uses. */
static int64_t intern_name(struct larder__index_builder *b, const char *s)
{
    size_t length = strlen(s);
    uint64_t hash = XXH3_64bits(s, length);
    uint64_t mask = b->num_name_slots - 1, slot = hash & mask;
    for (; b->names[slot]; slot = (slot + 1) & mask) {
        size_t have;
        const char *t = builder_string(b, b->names[slot] - 1, &have);
        if (have == length && memcmp(t, s, length) == 0) return (int64_t)b->names[slot] - 1;
    }
    int64_t offset = append_string(b, s, length);
    if (offset < 0) return offset;
    b->names[slot] = (uint64_t)offset + 1;
    if (++b->num_names * 2 > b->num_name_slots) {
        uint64_t n = b->num_name_slots * 2;
        uint64_t *grown = calloc(n, 8);
        if (!grown) return -ENOMEM;
        for (uint64_t i = 0; i < b->num_name_slots; i++) {
            if (!b->names[i]) continue;
            size_t len;
            const char *t = builder_string(b, b->names[i] - 1, &len);
            uint64_t j = XXH3_64bits(t, len) & (n - 1);
            while (grown[j])
                j = (j + 1) & (n - 1);
            grown[j] = b->names[i];
        }
        free(b->names);
        b->names = grown;
        b->num_name_slots = n;
    }
    return offset;
}

int64_t larder__index_builder_add_shard(struct larder__index_builder *b, const char *name,
                                        uint32_t format)
{
    if (!name[0] || (format != LARDER_FORMAT_TAR && format != LARDER_FORMAT_FLAT) ||
        b->num_shards >= UINT32_MAX)
        return larder__fail(LARDER_EUSAGE, "bad shard '%s' or format %u", name, format);
    if (larder__reserve((void **)&b->shards, &b->cap_shards, b->num_shards + 1, sizeof *b->shards) <
        0)
        return -ENOMEM;
    int64_t s = intern_name(b, name);
    if (s < 0) return s;
    b->shards[b->num_shards] = (struct builder_shard){.name = (uint64_t)s, .format = format};
    return (int64_t)b->num_shards++;
}

void larder__index_builder_set_shard(struct larder__index_builder *b, uint32_t shard, uint64_t size,
                                     uint64_t checksum)
{
    b->shards[shard].size = size;
    b->shards[shard].checksum = checksum;
}

/* Insert `id` into a slot table (no duplicate check). */
static void slot_insert(uint64_t *slots, uint64_t num_slots, uint64_t hash, uint64_t id)
{
    uint64_t mask = num_slots - 1, slot = hash & mask;
    while (slots[slot])
        slot = (slot + 1) & mask;
    slots[slot] = slot_tag(hash) << SLOT_ID_BITS | (id + 1);
}

static uint64_t sample_key_hash(const struct larder__index_builder *b, uint64_t id)
{
    size_t length;
    const char *key = builder_string(b, b->samples[id].key, &length);
    return larder__key_hash(key, length);
}

static int rebuild_slots(struct larder__index_builder *b, uint64_t num_slots)
{
    uint64_t *slots = calloc(num_slots, 8);
    if (!slots) return -ENOMEM;
    for (uint64_t i = 0; i < b->num_samples; i++)
        slot_insert(slots, num_slots, sample_key_hash(b, i), i);
    free(b->slots);
    b->slots = slots;
    b->num_slots = num_slots;
    return 0;
}

int64_t larder__index_builder_add_sample(struct larder__index_builder *b, uint32_t shard,
                                         uint64_t offset, uint64_t length, uint64_t checksum,
                                         const char *key, size_t key_length,
                                         const struct larder__field *fields, uint32_t num_fields)
{
    if (shard >= b->num_shards || b->num_samples >= MAX_SAMPLES || key_length == 0)
        return larder__fail(LARDER_EUSAGE, "bad sample record for key '%.*s'", (int)key_length,
                            key);
    uint64_t end;
    if (!larder__add_ok(offset, length, &end))
        return larder__fail(LARDER_EUSAGE, "sample '%.*s': range overflows", (int)key_length, key);
    uint32_t ndims = 0;
    for (uint32_t f = 0; f < num_fields; f++) {
        if (!larder__add_ok(fields[f].offset, fields[f].length, &end) || end > length ||
            fields[f].ndim > LARDER_MAX_DIMS || fields[f].dtype < 0 ||
            fields[f].dtype >= LARDER_DTYPE_COUNT)
            return larder__fail(LARDER_EUSAGE, "sample '%.*s': field %u does not fit the sample",
                                (int)key_length, key, f);
        ndims += fields[f].dtype ? fields[f].ndim : 0;
    }

    /* duplicate key? */
    uint64_t hash = larder__key_hash(key, key_length);
    uint64_t mask = b->num_slots - 1;
    for (uint64_t slot = hash & mask; b->slots[slot]; slot = (slot + 1) & mask) {
        if (b->slots[slot] >> SLOT_ID_BITS != slot_tag(hash)) continue;
        uint64_t other = (b->slots[slot] & SLOT_ID_MASK) - 1;
        size_t have;
        const char *k = builder_string(b, b->samples[other].key, &have);
        if (have == key_length && memcmp(k, key, key_length) == 0)
            return larder__fail(LARDER_EDUPKEY, "duplicate key '%.*s' (samples %llu and %llu)",
                                (int)key_length, key, (unsigned long long)other,
                                (unsigned long long)b->num_samples);
    }

    if (larder__reserve((void **)&b->samples, &b->cap_samples, b->num_samples + 1,
                        sizeof *b->samples) < 0 ||
        larder__reserve((void **)&b->fields, &b->cap_fields,
                        (b->num_fields + num_fields) * LARDER__INDEX_FIELD_SIZE, 1) < 0 ||
        larder__reserve((void **)&b->dims, &b->cap_dims, b->num_dims + ndims, 8) < 0)
        return -ENOMEM;
    int64_t key_offset = append_string(b, key, key_length);
    if (key_offset < 0) return key_offset;
    for (uint32_t f = 0; f < num_fields; f++) {
        int64_t name = intern_name(b, fields[f].name);
        if (name < 0) return name;
        uint8_t *r = b->fields + (b->num_fields + f) * LARDER__INDEX_FIELD_SIZE;
        memset(r, 0, LARDER__INDEX_FIELD_SIZE);
        larder__put_le64(r, (uint64_t)name);
        larder__put_le64(r + 8, fields[f].offset);
        larder__put_le64(r + 16, fields[f].length);
        larder__put_le64(r + 24, b->num_dims);
        r[32] = (uint8_t)fields[f].dtype;
        if (fields[f].dtype) {
            r[33] = (uint8_t)fields[f].ndim;
            for (uint32_t d = 0; d < fields[f].ndim; d++)
                b->dims[b->num_dims++] = fields[f].shape[d];
        }
    }
    uint64_t id = b->num_samples++;
    b->samples[id] = (struct builder_sample){.offset = offset,
                                             .length = length,
                                             .checksum = checksum,
                                             .key = (uint64_t)key_offset,
                                             .field_first = b->num_fields,
                                             .shard = shard,
                                             .num_fields = num_fields};
    b->num_fields += num_fields;
    b->total_bytes += length;
    if ((b->num_samples + 1) * 4 > b->num_slots * 3) {
        if (rebuild_slots(b, b->num_slots * 2) < 0) return -ENOMEM;
    } else {
        slot_insert(b->slots, b->num_slots, hash, id);
    }
    return (int64_t)id;
}

void larder__index_builder_set_checksum(struct larder__index_builder *b, uint64_t id,
                                        uint64_t checksum)
{
    b->samples[id].checksum = checksum;
}

uint64_t larder__index_builder_num_samples(const struct larder__index_builder *b)
{
    return b->num_samples;
}

const char *larder__index_builder_key(const struct larder__index_builder *b, uint64_t id)
{
    size_t length;
    return builder_string(b, b->samples[id].key, &length);
}

/* Buffered, hashing writer of the sections after the header. */
struct out {
    int fd;
    const char *path;
    uint64_t offset;
    uint8_t buf[1 << 16];
    size_t used;
    XXH3_state_t hash;
    int error;
};

static void out_flush(struct out *o)
{
    if (o->error || o->used == 0) return;
    o->error = larder__pwrite_full(o->fd, o->buf, o->used, o->offset, o->path);
    o->offset += o->used;
    o->used = 0;
}

static void out_put(struct out *o, const void *data, size_t length)
{
    const uint8_t *p = data;
    XXH3_128bits_update(&o->hash, p, length);
    while (length && !o->error) {
        size_t n = sizeof o->buf - o->used;
        if (n > length) n = length;
        memcpy(o->buf + o->used, p, n);
        o->used += n, p += n, length -= n;
        if (o->used == sizeof o->buf) out_flush(o);
    }
}

int larder__index_builder_write(struct larder__index_builder *b, const char *path,
                                char dataset_id[33])
{
    if (b->num_samples == 0) return larder__fail(LARDER_EEMPTY, "%s: no samples to index", path);
    uint64_t num_slots = key_slots_for(b->num_samples);
    if (num_slots != b->num_slots && rebuild_slots(b, num_slots) < 0) return -ENOMEM;

    /* The shard names go first in the string table, together, so that
     * opening the index (which checks every shard record) touches a page
     * or two of strings instead of one page per shard.  The builder's own
     * table follows unchanged; every other reference shifts by the prefix. */
    uint64_t prefix = 0;
    for (size_t i = 0; i < b->num_shards; i++) {
        size_t length;
        builder_string(b, b->shards[i].name, &length);
        prefix += 4 + length + 1;
    }
    uint64_t base_offset = prefix; /* the base, if any, follows the shard names */
    if (b->base) prefix += 4 + strlen(b->base) + 1;
    struct layout l;
    if (!compute_layout(b->num_shards, b->num_samples, b->num_fields, b->num_dims, num_slots,
                        prefix + b->strings_size, &l))
        return larder__fail(LARDER_EUSAGE, "index too large");

    uint8_t header[LARDER__INDEX_HEADER_SIZE] = {0};
    memcpy(header + H_MAGIC, LARDER__INDEX_MAGIC, 8);
    /* version 1 unless a base needs version 2: older readers keep reading
     * what they can read right, and refuse what they would misread */
    larder__put_le32(header + H_VERSION, b->base ? 2 : 1);
    if (b->base) {
        larder__put_le32(header + H_FLAGS, LARDER__INDEX_FLAG_BASE);
        larder__put_le64(header + H_BASE, base_offset);
    }
    larder__put_le32(header + H_HEADER_SIZE, LARDER__INDEX_HEADER_SIZE);
    larder__put_le64(header + H_NUM_SHARDS, b->num_shards);
    larder__put_le64(header + H_NUM_SAMPLES, b->num_samples);
    larder__put_le64(header + H_NUM_FIELDS, b->num_fields);
    larder__put_le64(header + H_NUM_DIMS, b->num_dims);
    larder__put_le64(header + H_NUM_KEY_SLOTS, num_slots);
    larder__put_le64(header + H_STRINGS_SIZE, prefix + b->strings_size);
    larder__put_le64(header + H_TOTAL_BYTES, b->total_bytes);
    larder__put_le64(header + H_FILE_SIZE, l.end);
    larder__put_le32(header + H_BLOCK_SIZE, b->block_size);

    size_t tmp_length = strlen(path) + 16;
    char *tmp = malloc(tmp_length);
    struct out *o = malloc(sizeof *o);
    if (!tmp || !o) {
        free(tmp);
        free(o);
        return -ENOMEM;
    }
    snprintf(tmp, tmp_length, "%s.tmp%d", path, (int)getpid());
    int fd = larder__open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        free(tmp);
        free(o);
        return fd;
    }
    o->fd = fd, o->path = tmp, o->offset = 0, o->used = 0, o->error = 0;
    XXH3_128bits_reset(&o->hash);
    out_put(o, header, sizeof header);
    for (size_t i = 0, name = 0; i < b->num_shards; i++) {
        uint8_t r[LARDER__INDEX_SHARD_SIZE] = {0};
        size_t length;
        builder_string(b, b->shards[i].name, &length);
        larder__put_le64(r, name);
        name += 4 + length + 1;
        larder__put_le64(r + 8, b->shards[i].size);
        larder__put_le64(r + 16, b->shards[i].checksum);
        larder__put_le32(r + 24, b->shards[i].format);
        out_put(o, r, sizeof r);
    }
    for (size_t i = 0; i < b->num_samples; i++) {
        const struct builder_sample *s = &b->samples[i];
        uint8_t r[LARDER__INDEX_SAMPLE_SIZE];
        larder__put_le64(r, s->offset);
        larder__put_le64(r + 8, s->length);
        larder__put_le64(r + 16, s->checksum);
        larder__put_le64(r + 24, prefix + s->key);
        larder__put_le64(r + 32, s->field_first);
        larder__put_le32(r + 40, s->shard);
        larder__put_le32(r + 44, s->num_fields);
        out_put(o, r, sizeof r);
    }
    for (size_t i = 0; i < b->num_fields; i++) {
        uint8_t r[LARDER__INDEX_FIELD_SIZE];
        memcpy(r, b->fields + i * LARDER__INDEX_FIELD_SIZE, sizeof r);
        larder__put_le64(r, prefix + larder__le64(r));
        out_put(o, r, sizeof r);
    }
    for (size_t i = 0; i < b->num_dims; i++) {
        uint8_t r[8];
        larder__put_le64(r, b->dims[i]);
        out_put(o, r, 8);
    }
    for (uint64_t i = 0; i < num_slots; i++) {
        uint8_t r[8];
        larder__put_le64(r, b->slots[i]);
        out_put(o, r, 8);
    }
    for (size_t i = 0; i < b->num_shards; i++) {
        size_t length;
        builder_string(b, b->shards[i].name, &length);
        out_put(o, b->strings + b->shards[i].name, 4 + length + 1);
    }
    if (b->base) {
        uint8_t length[4];
        larder__put_le32(length, (uint32_t)strlen(b->base));
        out_put(o, length, 4);
        out_put(o, b->base, strlen(b->base) + 1);
    }
    out_put(o, b->strings, b->strings_size);
    out_flush(o);
    int rc = o->error;
    XXH128_hash_t id = XXH3_128bits_digest(&o->hash);
    free(o);
    larder__put_le64(header + H_ID, id.low64);
    larder__put_le64(header + H_ID + 8, id.high64);
    larder__put_le64(header + H_CHECKSUM, XXH3_64bits(header, H_CHECKSUM));
    if (rc == 0) rc = larder__pwrite_full(fd, header, sizeof header, 0, tmp);
    if (rc == 0 && larder__sys.fsync(fd) < 0)
        rc = larder__fail(-errno, "%s: fsync: %s", tmp, strerror(errno));
    larder__sys.close(fd);
    if (rc == 0 && larder__sys.rename(tmp, path) < 0)
        rc = larder__fail(-errno, "%s: rename: %s", path, strerror(errno));
    if (rc < 0) unlink(tmp);
    free(tmp);
    if (rc == 0 && dataset_id) larder__hex128(id.high64, id.low64, dataset_id);
    return rc;
}
