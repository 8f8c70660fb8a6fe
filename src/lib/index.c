/*
 * index.c - reading index files (layout in docs/format.md); the builder
 * that writes them is index_builder.c.
 *
 * The reader never trusts the image: the header and the section bounds
 * are checked once at parse time, and every record is checked when it is
 * handed out, so a corrupt index yields LARDER_EBADINDEX naming the
 * record instead of a wild read.  Lookups are O(1): sample records are
 * fixed-width, and keys go through an open-addressing table of slots.
 */
#include "index_internal.h"

#include "hash.h"

uint64_t larder__key_hash(const char *key, size_t length)
{
    return XXH3_64bits(key, length);
}

/* Section offsets from the counts; false on overflow. */
bool larder__index_compute_layout(uint64_t num_shards, uint64_t num_samples, uint64_t num_fields,
                                  uint64_t num_dims, uint64_t num_key_slots,
                                  uint64_t num_block_sums, uint64_t strings_size,
                                  struct larder__index_layout *l)
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
        !larder__add_ok(l->key_slots, bytes, &l->block_sums))
        return false;
    if (!larder__mul_ok(num_block_sums, 8, &bytes) ||
        !larder__add_ok(l->block_sums, bytes, &l->strings))
        return false;
    return larder__add_ok(l->strings, strings_size, &l->end);
}

/* The number of checksum blocks of 2^shift bytes in a shard of `size` bytes. */
static uint64_t sum_blocks(uint64_t size, uint32_t shift)
{
    return shift == 0 || size == 0 ? 0 : ((size - 1) >> shift) + 1;
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

bool larder__index_image_is(const uint8_t *image, uint64_t size, uint64_t low, uint64_t high)
{
    if (!image || size < LARDER__INDEX_HEADER_SIZE || memcmp(image, "LARDERIX", 8) != 0)
        return false;
    if (larder__le64(image + H_ID) != low || larder__le64(image + H_ID + 8) != high) return false;
    XXH128_hash_t id = content_hash(image, size);
    return id.low64 == low && id.high64 == high;
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

/* The fixed part of the header: size, magic, version, header size, checksum. */
static int check_header(struct larder__index *ix, const uint8_t *h, uint64_t size, const char *name)
{
    if (size < LARDER__INDEX_HEADER_SIZE)
        return larder__fail(LARDER_EBADINDEX, "%s: %llu bytes, too short for an index header", name,
                            (unsigned long long)size);
    if (memcmp(h + H_MAGIC, LARDER__INDEX_MAGIC, 8) != 0)
        return larder__fail(LARDER_EBADINDEX, "%s: bad magic at offset 0: not a larder index",
                            name);
    ix->version = larder__le32(h + H_VERSION);
    if (ix->version < 1 || ix->version > LARDER__INDEX_VERSION)
        return larder__fail(LARDER_EVERSION,
                            "%s: index format version %u at offset %d; this build reads 1 to %d "
                            "(a newer larder wrote it)",
                            name, ix->version, H_VERSION, LARDER__INDEX_VERSION);
    if (larder__le32(h + H_HEADER_SIZE) != LARDER__INDEX_HEADER_SIZE)
        return larder__fail(LARDER_EBADINDEX, "%s: header size %u at offset %d, expected %d", name,
                            larder__le32(h + H_HEADER_SIZE), H_HEADER_SIZE,
                            LARDER__INDEX_HEADER_SIZE);
    if (XXH3_64bits(h, H_CHECKSUM) != larder__le64(h + H_CHECKSUM))
        return larder__fail(LARDER_EBADINDEX, "%s: header checksum mismatch (bytes 0-%d)", name,
                            H_CHECKSUM - 1);
    return 0;
}

/*
 * Every shard record, the sum of their sizes into ix->shard_bytes, and
 * (version 3) that their checksum blocks add up to the block checksum
 * table exactly.
 */
static int check_shards(struct larder__index *ix, const char *name)
{
    uint64_t sums = 0;
    for (uint64_t i = 0; i < ix->num_shards; i++) {
        struct larder__shard shard;
        int rc = larder__index_shard(ix, i, &shard);
        if (rc < 0) return rc;
        /* at most 2^47 per shard, 2^51 together: no overflow */
        sums += sum_blocks(shard.size, shard.sum_shift);
        if (sums > ix->num_block_sums)
            return larder__fail(LARDER_EBADINDEX,
                                "%s: shards 0-%llu have more checksum blocks than the %llu of the "
                                "block checksum table (offset %d)",
                                name, (unsigned long long)i, (unsigned long long)ix->num_block_sums,
                                H_NUM_BLOCK_SUMS);
        /* bounded one by one, the sum cannot overflow before it is checked */
        ix->shard_bytes += shard.size;
        if (ix->shard_bytes > LARDER__MAX_DATASET_SIZE)
            return larder__fail(LARDER_EBADINDEX,
                                "%s: shards 0-%llu hold more than 2^60 bytes together", name,
                                (unsigned long long)i);
    }
    if (sums != ix->num_block_sums)
        return larder__fail(LARDER_EBADINDEX,
                            "%s: the shards have %llu checksum blocks, the block checksum table "
                            "%llu (offset %d)",
                            name, (unsigned long long)sums, (unsigned long long)ix->num_block_sums,
                            H_NUM_BLOCK_SUMS);
    return 0;
}

int larder__index_parse(struct larder__index *ix, const void *image, uint64_t size,
                        const char *name)
{
    const uint8_t *h = image;
    memset(ix, 0, sizeof *ix);
    ix->name = name;
    int rc = check_header(ix, h, size, name);
    if (rc < 0) return rc;
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
    uint32_t flags = larder__le32(h + H_FLAGS);
    uint32_t known_flags =
        ix->version >= 3
            ? LARDER__INDEX_FLAG_BASE | LARDER__INDEX_FLAG_BLOCK_SUMS | LARDER__INDEX_FLAG_UNCHECKED
        : ix->version >= 2 ? LARDER__INDEX_FLAG_BASE
                           : 0;
    if (flags & ~known_flags)
        return larder__fail(LARDER_EBADINDEX, "%s: unknown flags %#x at offset %d", name, flags,
                            H_FLAGS);
    /* bytes 112-119 were reserved before version 3; versions 1 and 2 are
     * read as they always were */
    ix->unchecked = (flags & LARDER__INDEX_FLAG_UNCHECKED) != 0;
    if (ix->unchecked && (flags & LARDER__INDEX_FLAG_BLOCK_SUMS))
        return larder__fail(LARDER_EBADINDEX, "%s: block checksums in an index marked unchecked",
                            name);
    if (ix->version >= 3) {
        ix->num_block_sums = larder__le64(h + H_NUM_BLOCK_SUMS);
        if (!(flags & LARDER__INDEX_FLAG_BLOCK_SUMS) && ix->num_block_sums != 0)
            return larder__fail(LARDER_EBADINDEX,
                                "%s: %llu block checksums (offset %d) without the flag that "
                                "announces them",
                                name, (unsigned long long)ix->num_block_sums, H_NUM_BLOCK_SUMS);
    }

    struct larder__index_layout l;
    if (!larder__index_compute_layout(ix->num_shards, ix->num_samples, ix->num_fields, ix->num_dims,
                                      ix->num_key_slots, ix->num_block_sums, ix->strings_size, &l))
        return larder__fail(LARDER_EBADINDEX, "%s: header counts overflow 64 bits", name);
    if (l.end != file_size || file_size != size)
        return larder__fail(LARDER_EBADINDEX,
                            "%s: header counts give %llu bytes, header says %llu, file has %llu "
                            "(truncated or corrupt)",
                            name, (unsigned long long)l.end, (unsigned long long)file_size,
                            (unsigned long long)size);
    if (ix->num_samples > LARDER__INDEX_MAX_SAMPLES)
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
    ix->image = h;
    ix->image_size = size;
    ix->shards = h + l.shards;
    ix->samples = h + l.samples;
    ix->fields = h + l.fields;
    ix->dims = h + l.dims;
    ix->key_slots = h + l.key_slots;
    ix->block_sums = h + l.block_sums;
    ix->strings = h + l.strings;
    if (flags & LARDER__INDEX_FLAG_BASE) {
        ix->base = string_at(ix, larder__le64(h + H_BASE));
        if (!ix->base || !ix->base[0])
            return larder__fail(LARDER_EBADINDEX,
                                "%s: base string offset %llu (offset %d) out of range", name,
                                (unsigned long long)larder__le64(h + H_BASE), H_BASE);
    }
    return check_shards(ix, name);
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
    out->sum_shift = ix->version >= 3 ? larder__le32(r + 28) : 0; /* reserved before */
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
    if (out->sum_shift != 0 &&
        (out->sum_shift < LARDER__MIN_SUM_SHIFT || out->sum_shift > LARDER__MAX_SUM_SHIFT ||
         (UINT64_C(1) << out->sum_shift) < ix->block_size))
        return larder__fail(LARDER_EBADINDEX,
                            "%s: shard %llu ('%s', offset %llu): checksum blocks of 2^%u bytes; "
                            "they must be 2^%d to 2^%d bytes and no smaller than the block size "
                            "(%u)",
                            ix->name, (unsigned long long)shard, out->name,
                            (unsigned long long)record_offset, out->sum_shift,
                            LARDER__MIN_SUM_SHIFT, LARDER__MAX_SUM_SHIFT, ix->block_size);
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
        if (entry >> LARDER__SLOT_ID_BITS != larder__slot_tag(hash)) continue;
        uint64_t id = (entry & LARDER__SLOT_ID_MASK) - 1;
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
