/*
 * test_s3_list.c - the parser of S3's ListObjectsV2 answers (s3_list.c)
 * on answers shaped as S3's API reference shows them (a page with a
 * continuation token, keys with XML character references), and on
 * hostile ones: elements never closed, keys outside the prefix listed,
 * sizes that are not numbers, keys longer than S3 allows.  The expected
 * keys are written out here by hand.
 */
#include "s3_list.h"
#include "test.h"

struct seen {
    char names[8][256];
    uint64_t sizes[8];
    uint64_t stamps[8];
    int count;
};

static int collect(void *userdata, const char *name, size_t length, uint64_t size, uint64_t stamp)
{
    struct seen *s = userdata;
    if (s->count == 8 || length >= 256) return LARDER_EUSAGE;
    memcpy(s->names[s->count], name, length);
    s->names[s->count][length] = '\0';
    s->stamps[s->count] = stamp;
    s->sizes[s->count++] = size;
    return 0;
}

static int parse(const char *xml, const char *prefix, struct seen *s, bool *truncated, char *token)
{
    char key[1100];
    memset(s, 0, sizeof *s);
    return larder__s3_list_parse(xml, strlen(xml), prefix, key, sizeof key, collect, s, truncated,
                                 token, 256);
}

TEST(s3_list_parses_a_page_with_a_continuation_token)
{
    const char *xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                      "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\n"
                      "  <Name>bucket</Name>\n"
                      "  <Prefix>photos/</Prefix>\n"
                      "  <NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM="
                      "</NextContinuationToken>\n"
                      "  <KeyCount>3</KeyCount>\n"
                      "  <MaxKeys>3</MaxKeys>\n"
                      "  <IsTruncated>true</IsTruncated>\n"
                      "  <Contents>\n"
                      "    <Key>photos/</Key>\n" /* a folder marker */
                      "    <Size>0</Size>\n"
                      "  </Contents>\n"
                      "  <Contents>\n"
                      "    <Key>photos/2006/happyface.jpg</Key>\n"
                      "    <LastModified>2014-11-21T19:40:05.000Z</LastModified>\n"
                      "    <ETag>&quot;70ee1738b6b21e2c8a43f3a5ab0eee71&quot;</ETag>\n"
                      "    <Size>11</Size>\n"
                      "    <StorageClass>STANDARD</StorageClass>\n"
                      "  </Contents>\n"
                      "  <Contents>\n"
                      "    <Key>photos/a&amp;b &lt;c&gt; &#x4E2D;&#25991;.txt</Key>\n"
                      "    <Size>4192256</Size>\n"
                      "  </Contents>\n"
                      "</ListBucketResult>";
    struct seen s;
    bool truncated;
    char token[256];
    CHECK_EQ(parse(xml, "photos/", &s, &truncated, token), 0);
    CHECK(truncated);
    CHECK(strcmp(token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=") == 0);
    CHECK_EQ(s.count, 2);
    CHECK(strcmp(s.names[0], "2006/happyface.jpg") == 0);
    CHECK_EQ(s.sizes[0], 11);
    CHECK(strcmp(s.names[1], "a&b <c> \xe4\xb8\xad\xe6\x96\x87.txt") == 0); /* 中文 */
    CHECK_EQ(s.sizes[1], 4192256);
}

TEST(s3_list_last_page_and_empty_listing)
{
    struct seen s;
    bool truncated = true;
    char token[256];
    CHECK_EQ(parse("<ListBucketResult><Name>bucket</Name><Prefix></Prefix><KeyCount>0</KeyCount>"
                   "<IsTruncated>false</IsTruncated></ListBucketResult>",
                   "", &s, &truncated, token),
             0);
    CHECK(!truncated);
    CHECK_EQ(s.count, 0);
    CHECK_EQ(parse("<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>x</Key>"
                   "<Size>5</Size></Contents></ListBucketResult>",
                   "", &s, &truncated, token),
             0);
    CHECK_EQ(s.count, 1);
    CHECK(strcmp(s.names[0], "x") == 0);
}

/* A hostile answer: refused with LARDER_EPROTOCOL and `needle` in the message. */
static void expect_refused(const char *xml, const char *prefix, const char *needle)
{
    struct seen s;
    bool truncated;
    char token[256];
    int rc = parse(xml, prefix, &s, &truncated, token);
    if (rc != LARDER_EPROTOCOL || !strstr(larder_errmsg(), needle))
        fprintf(stderr, "    got %d: %s\n", rc, larder_errmsg());
    CHECK_EQ(rc, LARDER_EPROTOCOL);
    CHECK(strstr(larder_errmsg(), needle) != NULL);
}

TEST(s3_list_refuses_hostile_answers)
{
    expect_refused("<IsTruncated>false</IsTruncated><Contents><Key>a</Key><Size>1</Size>", "",
                   "<Contents> not closed");
    expect_refused("<Contents><Key>a<Size>1</Size></Contents>", "", "without a key");
    expect_refused("<Contents><Key>other/a</Key><Size>1</Size></Contents>", "mine/",
                   "not under the prefix");
    expect_refused("<Contents><Key>mine/a</Key><Size>-1</Size></Contents>", "mine/",
                   "not a number");
    expect_refused("<Contents><Key>mine/a</Key></Contents>", "mine/", "has no size");
    expect_refused("<Contents><Key>mine/a</Key><Size>123456789012345678901</Size></Contents>",
                   "mine/", "has no size");
    expect_refused("<Contents><Key>a&#0;b</Key><Size>1</Size></Contents>", "", "without a key");
    expect_refused("<Contents><Key>a&bogus;b</Key><Size>1</Size></Contents>", "", "without a key");
    expect_refused("<IsTruncated>true</IsTruncated>", "", "without a continuation token");
    expect_refused("<IsTruncated>true", "", "<IsTruncated> not closed");
    /* a key longer than the buffer (S3 allows 1024 bytes) */
    char *xml = malloc(3000);
    char *p = xml + sprintf(xml, "<Contents><Key>");
    memset(p, 'k', 2000);
    sprintf(p + 2000, "</Key><Size>1</Size></Contents>");
    expect_refused(xml, "", "without a key");
    free(xml);
}

/* An object overwritten at the same size has another ETag and
 * LastModified: another stamp (what a listing-only index records, so the
 * dataset id changes); the same listing gives the same stamp. */
TEST(s3_list_stamps_an_objects_version)
{
    const char *xml = "<ListBucketResult>"
                      "<Contents><Key>d/a.bin</Key><LastModified>2026-11-30T10:00:00.000Z"
                      "</LastModified><ETag>&quot;aaaa&quot;</ETag><Size>8</Size></Contents>"
                      "<Contents><Key>d/b.bin</Key><LastModified>2026-11-30T10:00:00.000Z"
                      "</LastModified><ETag>&quot;aaaa&quot;</ETag><Size>8</Size></Contents>"
                      "<Contents><Key>d/c.bin</Key><LastModified>2026-11-30T10:00:00.000Z"
                      "</LastModified><ETag>&quot;bbbb&quot;</ETag><Size>8</Size></Contents>"
                      "<Contents><Key>d/e.bin</Key><LastModified>2026-11-30T11:00:00.000Z"
                      "</LastModified><ETag>&quot;aaaa&quot;</ETag><Size>8</Size></Contents>"
                      "<Contents><Key>d/f.bin</Key><Size>8</Size></Contents>"
                      "</ListBucketResult>";
    struct seen s;
    bool truncated;
    char token[256];
    CHECK_EQ(parse(xml, "d/", &s, &truncated, token), 0);
    CHECK_EQ(s.count, 5);
    CHECK_EQ(s.stamps[0], s.stamps[1]); /* the same version listed */
    CHECK(s.stamps[2] != s.stamps[0]);  /* another ETag */
    CHECK(s.stamps[3] != s.stamps[0]);  /* another LastModified */
    CHECK(s.stamps[4] != s.stamps[0]);  /* neither listed */
}
