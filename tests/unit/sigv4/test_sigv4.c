/*
 * SigV4 signing and AWS configuration: the signer against AWS's published
 * test vectors (the SigV4 test suite and the S3 documentation's examples),
 * the pieces of the canonical request one by one, and the loading of
 * credentials, region and endpoint from the environment and shared files.
 */
#include "cnx_test.h"

#include <sys/stat.h>

#include "cnx/error.h"
#include "sigv4_int.h"

#define MAX_HEADERS 8

typedef struct vector {
    const char *name;
    const char *method;
    const char *path;
    const char *query;
    int normalize_path;
    cnx__sigv4_header headers[MAX_HEADERS]; /* up to the first NULL name */
    const char *payload_hash;
    const char *creq;  /* expected canonical request */
    const char *sts;   /* expected string to sign */
    const char *authz; /* expected Authorization header value */
} vector;

static cnx__sigv4_request vector_request(const vector *v)
{
    cnx__sigv4_request req = {0};
    req.method = v->method;
    req.path = v->path;
    req.query = v->query;
    req.headers = v->headers;
    while (req.nheaders < MAX_HEADERS && v->headers[req.nheaders].name)
        req.nheaders++;
    req.payload_hash = v->payload_hash;
    req.normalize_path = v->normalize_path;
    return req;
}

/* assert_string_equal, naming the vector when it fails. */
static void expect_str(const char *vec, const char *what, const char *got,
                       const char *want)
{
    if (got == NULL || strcmp(got, want) != 0) {
        print_error("vector %s, %s:\n--- got\n%s\n--- want\n%s\n", vec, what,
                    got ? got : "(null)", want);
        fail();
    }
}

/*
 * The AWS SigV4 test suite: credentials AKIDEXAMPLE /
 * wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY, region us-east-1, service
 * "service", 2015-08-30T12:36:00Z. Every case of the suite's v4 directory,
 * copied (data only) from awslabs/aws-c-auth, path
 * tests/aws-signing-test-suite/v4/<case>/{request.txt, context.json,
 * header-canonical-request.txt, header-string-to-sign.txt,
 * header-signed-request.txt} at commit 3281f8692e6fd10562c4585a4dded5c16b322698
 * (the suite first published in the AWS General Reference, "Signature
 * Version 4 Test Suite"). As there, the signer's own headers are part of the
 * input: X-Amz-Date, X-Amz-Content-Sha256 where context.json has
 * "sign_body": true, X-Amz-Security-Token where it has a token and no
 * "omit_session_token" (post-sts-header-after adds it after signing).
 * Paths and queries are the request line's bytes (raw UTF-8 and spaces
 * included); "normalize": false cases have normalize_path 0.
 */
/* clang-format off */
static const vector suite[] = {
    {"get-header-key-duplicate", "GET", "/", "", 1,
     {{"Host", "example.amazonaws.com"},
      {"My-Header1", "value2"},
      {"My-Header1", "value2"},
      {"My-Header1", "value1"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "GET\n"
     "/\n"
     "\n"
     "host:example.amazonaws.com\n"
     "my-header1:value2,value2,value1\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;my-header1;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "dc7f04a3abfde8d472b0ab1a418b741b7c67174dad1551b4117b15527fbe966c",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;my-header1;x-amz-date, Signature=c9d"
     "5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea"},
    {"get-header-value-multiline", "GET", "/", "", 1,
     {{"Host", "example.amazonaws.com"},
      {"My-Header1", "value1\n"
       "  value2\n"
       "     value3"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "GET\n"
     "/\n"
     "\n"
     "host:example.amazonaws.com\n"
     "my-header1:value1 value2 value3\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;my-header1;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "e99419459a677bc11de234014be3c4e72c1ea5b454ceb58b613061f5d7a162e8",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;my-header1;x-amz-date, Signature=cfd"
     "34249e4b1c8d6b91ef74165d41a32e5fab3306300901bb65a51a73575eefd"},
    {"get-header-value-order", "GET", "/", "", 1,
     {{"Host", "example.amazonaws.com"},
      {"My-Header1", "value4"},
      {"My-Header1", "value1"},
      {"My-Header1", "value3"},
      {"My-Header1", "value2"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "GET\n"
     "/\n"
     "\n"
     "host:example.amazonaws.com\n"
     "my-header1:value4,value1,value3,value2\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;my-header1;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "31ce73cd3f3d9f66977ad3dd957dc47af14df92fcd8509f59b349e9137c58b86",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;my-header1;x-amz-date, Signature=08c"
     "7e5a9acfcfeb3ab6b2185e75ce8b1deb5e634ec47601a50643f830c755c01"},
    {"get-header-value-trim", "GET", "/", "", 1,
     {{"Host", "example.amazonaws.com"},
      {"My-Header1", " value1"},
      {"My-Header2", " \"a   b   c\""},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "GET\n"
     "/\n"
     "\n"
     "host:example.amazonaws.com\n"
     "my-header1:value1\n"
     "my-header2:\"a b c\"\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;my-header1;my-header2;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "a726db9b0df21c14f559d0a978e563112acb1b9e05476f0a6a1c7d68f28605c7",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;my-header1;my-header2;x-amz-date, Si"
     "gnature=acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9"
     "c736"},
    {"get-relative-normalized", "GET", "/example/..", "", 1,
     {{"Host", "example.amazonaws.com"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "GET\n"
     "/\n"
     "\n"
     "host:example.amazonaws.com\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b7"
     "3ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"},
    {"get-relative-relative-normalized", "GET", "/example1/example2/../..", "", 1,
     {{"Host", "example.amazonaws.com"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "GET\n"
     "/\n"
     "\n"
     "host:example.amazonaws.com\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b7"
     "3ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"},
    {"get-relative-relative-unnormalized", "GET", "/example1/example2/../..", "", 0,
     {{"Host", "example.amazonaws.com"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "GET\n"
     "/example1/example2/../..\n"
     "\n"
     "host:example.amazonaws.com\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "76115030c0f3ff06c20fdff5ceb6d5e0b835a1743e00b94fea7c7f381269437b",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;x-amz-date, Signature=dc33e0856fd4ba"
     "ca4d7aa2146c38958283844764f38c74252a333df5e613003b"},
    {"get-relative-unnormalized", "GET", "/example/..", "", 0,
     {{"Host", "example.amazonaws.com"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "GET\n"
     "/example/..\n"
     "\n"
     "host:example.amazonaws.com\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "0511f456aa502b456d135fcb9d749374a55228f9dbeedda1eacf659e05b0615b",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;x-amz-date, Signature=eca7ead57bb5aa"
     "5c8e28007acd4ff04e1ff9a0ff3b237ec1554a184887ff9282"},
    {"get-slash-dot-slash-normalized", "GET", "/./", "", 1,
     {{"Host", "example.amazonaws.com"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "GET\n"
     "/\n"
     "\n"
     "host:example.amazonaws.com\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b7"
     "3ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"},
    {"get-slash-dot-slash-unnormalized", "GET", "/./", "", 0,
     {{"Host", "example.amazonaws.com"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "GET\n"
     "/./\n"
     "\n"
     "host:example.amazonaws.com\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "d67825e2268bd77a97c7688b8d72c31a3c1855b309808505ba0a9747d2465aa7",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;x-amz-date, Signature=68714168e6557f"
     "8f2de0ef956fc24dc2593a4bd2961f8df51898d8a134695145"},
    {"get-slash-normalized", "GET", "//", "", 1,
     {{"Host", "example.amazonaws.com"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "GET\n"
     "/\n"
     "\n"
     "host:example.amazonaws.com\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b7"
     "3ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"},
    {"get-slash-pointless-dot-normalized", "GET", "/./example", "", 1,
     {{"Host", "example.amazonaws.com"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "GET\n"
     "/example\n"
     "\n"
     "host:example.amazonaws.com\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "214d50c111a8edc4819da6a636336472c916b5240f51e9a51b5c3305180cf702",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;x-amz-date, Signature=ef75d96142cf21"
     "edca26f06005da7988e4f8dc83a165a80865db7089db637ec5"},
    {"get-slash-pointless-dot-unnormalized", "GET", "/./example", "", 0,
     {{"Host", "example.amazonaws.com"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "GET\n"
     "/./example\n"
     "\n"
     "host:example.amazonaws.com\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "73895e0e829507e28e39fd24669aedc2434a8e179e547e3c075b42921f952cdb",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;x-amz-date, Signature=beb03f223f7dea"
     "e4146464f06e29eebbee9c8afbe15c290cf07aa8b119e14cff"},
    {"get-slash-unnormalized", "GET", "//", "", 0,
     {{"Host", "example.amazonaws.com"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "GET\n"
     "//\n"
     "\n"
     "host:example.amazonaws.com\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "80cb39203d058af815de2b79250ff56e1b73eb9b4718c86556cdc6f150c5d209",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;x-amz-date, Signature=c88bcd3d312d75"
     "078c0cd961d6deae3f4c754924b01669efcfcb439fd5e5b76e"},
    {"get-slashes-normalized", "GET", "//example//", "", 1,
     {{"Host", "example.amazonaws.com"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "GET\n"
     "/example/\n"
     "\n"
     "host:example.amazonaws.com\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "cb96b4ac96d501f7c5c15bc6d67b3035061cfced4af6585ad927f7e6c985c015",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;x-amz-date, Signature=9a624bd73a37c9"
     "a373b5312afbebe7a714a789de108f0bdfe846570885f57e84"},
    {"get-slashes-unnormalized", "GET", "//example//", "", 0,
     {{"Host", "example.amazonaws.com"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "GET\n"
     "//example//\n"
     "\n"
     "host:example.amazonaws.com\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "528ec3105ee1f34ab014bb0a1a45da0ed2742a4fea3555149e5b4d5d201eb240",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;x-amz-date, Signature=87cca117541a14"
     "7f6df867677d98a7d80dff226d2bfca9e4ffa899665623c7e5"},
    {"get-space-normalized", "GET", "/example space/", "", 1,
     {{"Host", "example.amazonaws.com"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "GET\n"
     "/example%20space/\n"
     "\n"
     "host:example.amazonaws.com\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "63ee75631ed7234ae61b5f736dfc7754cdccfedbff4b5128a915706ee9390d86",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;x-amz-date, Signature=65248758320032"
     "5589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741"},
    {"get-space-unnormalized", "GET", "/example space/", "", 0,
     {{"Host", "example.amazonaws.com"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "GET\n"
     "/example%20space/\n"
     "\n"
     "host:example.amazonaws.com\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "63ee75631ed7234ae61b5f736dfc7754cdccfedbff4b5128a915706ee9390d86",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;x-amz-date, Signature=65248758320032"
     "5589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741"},
    {"get-unreserved", "GET", "/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", "", 1,
     {{"Host", "example.amazonaws.com"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "GET\n"
     "/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
     "\n"
     "\n"
     "host:example.amazonaws.com\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "6a968768eefaa713e2a6b16b589a8ea192661f098f37349f4e2c0082757446f9",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;x-amz-date, Signature=07ef7494c76fa4"
     "850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f"},
    {"get-utf8", "GET", "/\341\210\264", "", 1,
     {{"Host", "example.amazonaws.com"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "GET\n"
     "/%E1%88%B4\n"
     "\n"
     "host:example.amazonaws.com\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "2a0a97d02205e45ce2e994789806b19270cfbbb0921b278ccf58f5249ac42102",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;x-amz-date, Signature=8318018e0b0f22"
     "3aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85"},
    {"get-vanilla", "GET", "/", "", 1,
     {{"Host", "example.amazonaws.com"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "GET\n"
     "/\n"
     "\n"
     "host:example.amazonaws.com\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b7"
     "3ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"},
    {"get-vanilla-empty-query-key", "GET", "/", "Param1=value1", 1,
     {{"Host", "example.amazonaws.com"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "GET\n"
     "/\n"
     "Param1=value1\n"
     "host:example.amazonaws.com\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "1e24db194ed7d0eec2de28d7369675a243488e08526e8c1c73571282f7c517ab",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;x-amz-date, Signature=a67d582fa61cc5"
     "04c4bae71f336f98b97f1ea3c7a6bfe1b6e45aec72011b9aeb"},
    {"get-vanilla-query", "GET", "/", "", 1,
     {{"Host", "example.amazonaws.com"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "GET\n"
     "/\n"
     "\n"
     "host:example.amazonaws.com\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b7"
     "3ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"},
    {"get-vanilla-query-order-encoded", "GET", "/", "Param-3=Value3&Param=Value2&%E1%88%B4=Value1", 1,
     {{"Host", "example.amazonaws.com"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "GET\n"
     "/\n"
     "%E1%88%B4=Value1&Param=Value2&Param-3=Value3\n"
     "host:example.amazonaws.com\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "868294f5c38bd141c4972a373a76654f1418a8e4fc18b2e7903ae45e8ae0ec71",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;x-amz-date, Signature=371d3713e185cc"
     "334048618a97f809c9ffe339c62934c032af5a0e595648fcac"},
    {"get-vanilla-query-order-key-case", "GET", "/", "Param2=value2&Param1=value1", 1,
     {{"Host", "example.amazonaws.com"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "GET\n"
     "/\n"
     "Param1=value1&Param2=value2\n"
     "host:example.amazonaws.com\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "816cd5b414d056048ba4f7c5386d6e0533120fb1fcfa93762cf0fc39e2cf19e0",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;x-amz-date, Signature=b97d918cfa904a"
     "5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"},
    {"get-vanilla-query-unreserved", "GET", "/", "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz=-"
     "._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", 1,
     {{"Host", "example.amazonaws.com"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "GET\n"
     "/\n"
     "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz=-"
     "._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz\n"
     "host:example.amazonaws.com\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "c30d4703d9f799439be92736156d47ccfb2d879ddf56f5befa6d1d6aab979177",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;x-amz-date, Signature=9c3e54bfcdf0b1"
     "9771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197"},
    {"get-vanilla-utf8-query", "GET", "/", "\341\210\264=bar", 1,
     {{"Host", "example.amazonaws.com"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "GET\n"
     "/\n"
     "%E1%88%B4=bar\n"
     "host:example.amazonaws.com\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "eb30c5bed55734080471a834cc727ae56beb50e5f39d1bff6d0d38cb192a7073",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;x-amz-date, Signature=2cdec8eed09864"
     "9ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04"},
    {"get-vanilla-with-session-token", "GET", "/", "", 1,
     {{"Host", "example.amazonaws.com"},
      {"X-Amz-Date", "20150830T123600Z"},
      {"X-Amz-Security-Token", "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "GET\n"
     "/\n"
     "\n"
     "host:example.amazonaws.com\n"
     "x-amz-date:20150830T123600Z\n"
     "x-amz-security-token:6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa"
     "31553b73ebf194267\n"
     "\n"
     "host;x-amz-date;x-amz-security-token\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "067b36aa60031588cea4a4cde1f21215227a047690c72247f1d70b32fbbfad2b",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;x-amz-date;x-amz-security-token, Sig"
     "nature=07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e"
     "7f8"},
    {"post-header-key-case", "POST", "/", "", 1,
     {{"Host", "example.amazonaws.com"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "POST\n"
     "/\n"
     "\n"
     "host:example.amazonaws.com\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "553f88c9e4d10fc9e109e2aeb65f030801b70c2f6468faca261d401ae622fc87",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;x-amz-date, Signature=5da7c1a2acd57c"
     "ee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"},
    {"post-header-key-sort", "POST", "/", "", 1,
     {{"Host", "example.amazonaws.com"},
      {"My-Header1", "value1"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "POST\n"
     "/\n"
     "\n"
     "host:example.amazonaws.com\n"
     "my-header1:value1\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;my-header1;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "9368318c2967cf6de74404b30c65a91e8f6253e0a8659d6d5319f1a812f87d65",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;my-header1;x-amz-date, Signature=c54"
     "10059b04c1ee005303aed430f6e6645f61f4dc9e1461ec8f8916fdf18852c"},
    {"post-header-value-case", "POST", "/", "", 1,
     {{"Host", "example.amazonaws.com"},
      {"My-Header1", "VALUE1"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "POST\n"
     "/\n"
     "\n"
     "host:example.amazonaws.com\n"
     "my-header1:VALUE1\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;my-header1;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "d51ced243e649e3de6ef63afbbdcbca03131a21a7103a1583706a64618606a93",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;my-header1;x-amz-date, Signature=cdb"
     "c9802e29d2942e5e10b5bccfdd67c5f22c7c4e8ae67b53629efa58b974b7d"},
    {"post-sts-header-after", "POST", "/", "", 1,
     {{"Host", "example.amazonaws.com"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "POST\n"
     "/\n"
     "\n"
     "host:example.amazonaws.com\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "553f88c9e4d10fc9e109e2aeb65f030801b70c2f6468faca261d401ae622fc87",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;x-amz-date, Signature=5da7c1a2acd57c"
     "ee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"},
    {"post-sts-header-before", "POST", "/", "", 1,
     {{"Host", "example.amazonaws.com"},
      {"X-Amz-Date", "20150830T123600Z"},
      {"X-Amz-Security-Token", "AQoDYXdzEPT//////////wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQWL"
       "WsKWHGBuFqwAeMicRXmxfpSPfIeoIYRqTflfKD8YUuwthAx7mSEI/qkPpKPi/kMcGdQr"
       "mGdeehM4IC1NtBmUpp2wUE8phUZampKsburEDy0KPkyQDYwT7WZ0wq5VSXDvp75YU9HF"
       "vlRd8Tx6q6fE8YQcHNVXAkiY9q6d+xo0rKwT38xVqr7ZD0u0iPPkUL64lIZbqBAz+scq"
       "Kmlzm8FDrypNC9Yjc8fPOLn9FX9KSYvKTr4rvx3iSIlTJabIQwj2ICCR/oLxBA=="}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "POST\n"
     "/\n"
     "\n"
     "host:example.amazonaws.com\n"
     "x-amz-date:20150830T123600Z\n"
     "x-amz-security-token:AQoDYXdzEPT//////////wEXAMPLEtc764bNrC9SAPBSM22"
     "wDOk4x4HIZ8j4FZTwdQWLWsKWHGBuFqwAeMicRXmxfpSPfIeoIYRqTflfKD8YUuwthAx"
     "7mSEI/qkPpKPi/kMcGdQrmGdeehM4IC1NtBmUpp2wUE8phUZampKsburEDy0KPkyQDYw"
     "T7WZ0wq5VSXDvp75YU9HFvlRd8Tx6q6fE8YQcHNVXAkiY9q6d+xo0rKwT38xVqr7ZD0u"
     "0iPPkUL64lIZbqBAz+scqKmlzm8FDrypNC9Yjc8fPOLn9FX9KSYvKTr4rvx3iSIlTJab"
     "IQwj2ICCR/oLxBA==\n"
     "\n"
     "host;x-amz-date;x-amz-security-token\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "c237e1b440d4c63c32ca95b5b99481081cb7b13c7e40434868e71567c1a882f6",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;x-amz-date;x-amz-security-token, Sig"
     "nature=85d96828115b5dc0cfc3bd16ad9e210dd772bbebba041836c64533a82be05"
     "ead"},
    {"post-vanilla", "POST", "/", "", 1,
     {{"Host", "example.amazonaws.com"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "POST\n"
     "/\n"
     "\n"
     "host:example.amazonaws.com\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "553f88c9e4d10fc9e109e2aeb65f030801b70c2f6468faca261d401ae622fc87",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;x-amz-date, Signature=5da7c1a2acd57c"
     "ee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"},
    {"post-vanilla-empty-query-value", "POST", "/", "Param1=value1", 1,
     {{"Host", "example.amazonaws.com"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "POST\n"
     "/\n"
     "Param1=value1\n"
     "host:example.amazonaws.com\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "9d659678c1756bb3113e2ce898845a0a79dbbc57b740555917687f1b3340fbbd",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;x-amz-date, Signature=28038455d6de14"
     "eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11"},
    {"post-vanilla-query", "POST", "/", "Param1=value1", 1,
     {{"Host", "example.amazonaws.com"},
      {"X-Amz-Date", "20150830T123600Z"}},
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "POST\n"
     "/\n"
     "Param1=value1\n"
     "host:example.amazonaws.com\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "host;x-amz-date\n"
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "9d659678c1756bb3113e2ce898845a0a79dbbc57b740555917687f1b3340fbbd",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=host;x-amz-date, Signature=28038455d6de14"
     "eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11"},
    {"post-x-www-form-urlencoded", "POST", "/", "", 1,
     {{"Content-Type", "application/x-www-form-urlencoded"},
      {"Host", "example.amazonaws.com"},
      {"Content-Length", "13"},
      {"X-Amz-Date", "20150830T123600Z"},
      {"X-Amz-Content-Sha256", "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e"}},
     "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e",
     "POST\n"
     "/\n"
     "\n"
     "content-length:13\n"
     "content-type:application/x-www-form-urlencoded\n"
     "host:example.amazonaws.com\n"
     "x-amz-content-sha256:9095672bbd1f56dfc5b65f3e153adc8731a4a6541923291"
     "06275f4c7b24d0b6e\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "content-length;content-type;host;x-amz-content-sha256;x-amz-date\n"
     "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "b1edd1d03544c25390e32085d55b57acc9a3961bb59415ff86c45c3d89d16cfb",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=content-length;content-type;host;x-amz-co"
     "ntent-sha256;x-amz-date, Signature=d3875051da38690788ef43de4db0d8f28"
     "0229d82040bfac253562e56c3f20e0b"},
    {"post-x-www-form-urlencoded-parameters", "POST", "/", "", 1,
     {{"Content-Type", "application/x-www-form-urlencoded; charset=utf-8"},
      {"Host", "example.amazonaws.com"},
      {"Content-Length", "13"},
      {"X-Amz-Date", "20150830T123600Z"},
      {"X-Amz-Content-Sha256", "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e"}},
     "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e",
     "POST\n"
     "/\n"
     "\n"
     "content-length:13\n"
     "content-type:application/x-www-form-urlencoded; charset=utf-8\n"
     "host:example.amazonaws.com\n"
     "x-amz-content-sha256:9095672bbd1f56dfc5b65f3e153adc8731a4a6541923291"
     "06275f4c7b24d0b6e\n"
     "x-amz-date:20150830T123600Z\n"
     "\n"
     "content-length;content-type;host;x-amz-content-sha256;x-amz-date\n"
     "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e",
     "AWS4-HMAC-SHA256\n"
     "20150830T123600Z\n"
     "20150830/us-east-1/service/aws4_request\n"
     "a89f1a5b53e37702ee6363ce1da3ce8f54386f3c8f352ae652153c2982a0bc4d",
     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/a"
     "ws4_request, SignedHeaders=content-length;content-type;host;x-amz-co"
     "ntent-sha256;x-amz-date, Signature=328d1b9eaadca9f5818ef05e8392801e0"
     "91653bafec24fcab71e7344e7f51422"},
};
/* clang-format on */

#define SUITE_AK "AKIDEXAMPLE"
#define SUITE_SK "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"

static void check_vector(const vector *v, const char *ak, const char *sk,
                         const char *date, const char *region,
                         const char *service, int auth_commas_spaced)
{
    cnx__sigv4_request req = vector_request(v);
    char *creq = NULL, *sts = NULL;
    char authz[CNX_SIGV4_AUTH_MAX];
    assert_int_equal(cnx__sigv4_canonical_request(&req, &creq), 0);
    expect_str(v->name, "canonical request", creq, v->creq);
    assert_int_equal(
        cnx__sigv4_string_to_sign(&req, date, region, service, &sts), 0);
    expect_str(v->name, "string to sign", sts, v->sts);
    assert_int_equal(
        cnx__sigv4_authorization(&req, ak, sk, date, region, service, authz),
        0);
    if (!auth_commas_spaced) {
        /* The S3 pages print "...aws4_request,SignedHeaders=...": the
         * same header (AWS accepts both); compare without the spaces. */
        char *w = authz;
        for (const char *r = authz; *r; r++)
            if (!(*r == ' ' && r > authz && r[-1] == ','))
                *w++ = *r;
        *w = '\0';
    }
    expect_str(v->name, "Authorization", authz, v->authz);
    free(creq);
    free(sts);
}

static void test_sigv4__aws_test_suite(void **state)
{
    (void)state;
    size_t n = sizeof(suite) / sizeof(suite[0]);
    assert_true(n >= 15);
    for (size_t i = 0; i < n; i++)
        check_vector(&suite[i], SUITE_AK, SUITE_SK, "20150830T123600Z",
                     "us-east-1", "service", 1);
}

/*
 * The four examples of the Amazon S3 API Reference, "Signature
 * Calculations for the Authorization Header: Transferring Payload in a
 * Single Chunk (AWS Signature Version 4)", section "Examples: Signature
 * Calculations" (https://docs.aws.amazon.com/AmazonS3/latest/API/
 * sig-v4-header-based-auth.html; the same text is kept in the repository
 * ForeverPyrite/r2client, path aws_sigv4/examples.md): examplebucket,
 * AKIAIOSFODNN7EXAMPLE / wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY,
 * us-east-1, s3, 20130524T000000Z. S3 does not normalize paths. The header
 * values are as the pages print them, trailing spaces included.
 */
/* clang-format off */
#define S3_EMPTY "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define S3_PUT_BODY "Welcome to Amazon S3."
#define S3_PUT_HASH "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072"
#define S3_HOST {"Host", "examplebucket.s3.amazonaws.com"}

static const vector s3_examples[] = {
    {"s3-get-object", "GET", "/test.txt", "", 0,
     {S3_HOST,
      {"Range", "bytes=0-9 "},
      {"x-amz-content-sha256", S3_EMPTY},
      {"x-amz-date", "20130524T000000Z "}},
     S3_EMPTY,
     "GET\n"
     "/test.txt\n"
     "\n"
     "host:examplebucket.s3.amazonaws.com\n"
     "range:bytes=0-9\n"
     "x-amz-content-sha256:" S3_EMPTY "\n"
     "x-amz-date:20130524T000000Z\n"
     "\n"
     "host;range;x-amz-content-sha256;x-amz-date\n" S3_EMPTY,
     "AWS4-HMAC-SHA256\n"
     "20130524T000000Z\n"
     "20130524/us-east-1/s3/aws4_request\n"
     "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972",
     "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/"
     "s3/aws4_request,SignedHeaders=host;range;x-amz-content-sha256;"
     "x-amz-date,Signature="
     "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"},
    {"s3-put-object", "PUT", "/test%24file.text", "", 0,
     {S3_HOST,
      {"Date", "Fri, 24 May 2013 00:00:00 GMT"},
      {"x-amz-date", "20130524T000000Z "},
      {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
      {"x-amz-content-sha256", S3_PUT_HASH}},
     S3_PUT_HASH,
     "PUT\n"
     "/test%24file.text\n"
     "\n"
     "date:Fri, 24 May 2013 00:00:00 GMT\n"
     "host:examplebucket.s3.amazonaws.com\n"
     "x-amz-content-sha256:" S3_PUT_HASH "\n"
     "x-amz-date:20130524T000000Z\n"
     "x-amz-storage-class:REDUCED_REDUNDANCY\n"
     "\n"
     "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class\n"
     S3_PUT_HASH,
     "AWS4-HMAC-SHA256\n"
     "20130524T000000Z\n"
     "20130524/us-east-1/s3/aws4_request\n"
     "9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d",
     "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/"
     "s3/aws4_request,SignedHeaders=date;host;x-amz-content-sha256;"
     "x-amz-date;x-amz-storage-class,Signature="
     "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"},
    {"s3-get-bucket-lifecycle", "GET", "/", "lifecycle", 0,
     {S3_HOST,
      {"x-amz-date", "20130524T000000Z "},
      {"x-amz-content-sha256", S3_EMPTY}},
     S3_EMPTY,
     "GET\n"
     "/\n"
     "lifecycle=\n"
     "host:examplebucket.s3.amazonaws.com\n"
     "x-amz-content-sha256:" S3_EMPTY "\n"
     "x-amz-date:20130524T000000Z\n"
     "\n"
     "host;x-amz-content-sha256;x-amz-date\n" S3_EMPTY,
     "AWS4-HMAC-SHA256\n"
     "20130524T000000Z\n"
     "20130524/us-east-1/s3/aws4_request\n"
     "9766c798316ff2757b517bc739a67f6213b4ab36dd5da2f94eaebf79c77395ca",
     "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/"
     "s3/aws4_request,SignedHeaders=host;x-amz-content-sha256;x-amz-date,"
     "Signature="
     "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"},
    {"s3-list-objects", "GET", "/", "max-keys=2&prefix=J", 0,
     {S3_HOST,
      {"x-amz-date", "20130524T000000Z "},
      {"x-amz-content-sha256", S3_EMPTY}},
     S3_EMPTY,
     "GET\n"
     "/\n"
     "max-keys=2&prefix=J\n"
     "host:examplebucket.s3.amazonaws.com\n"
     "x-amz-content-sha256:" S3_EMPTY "\n"
     "x-amz-date:20130524T000000Z\n"
     "\n"
     "host;x-amz-content-sha256;x-amz-date\n" S3_EMPTY,
     "AWS4-HMAC-SHA256\n"
     "20130524T000000Z\n"
     "20130524/us-east-1/s3/aws4_request\n"
     "df57d21db20da04d7fa30298dd4488ba3a2b47ca3a489c74750e0f1e7df1b9b7",
     "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/"
     "s3/aws4_request,SignedHeaders=host;x-amz-content-sha256;x-amz-date,"
     "Signature="
     "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"},
};
/* clang-format on */

static void test_sigv4__s3_documentation_examples(void **state)
{
    char hash[65];
    (void)state;
    cnx__sigv4_hex_sha256(S3_PUT_BODY, strlen(S3_PUT_BODY), hash);
    assert_string_equal(hash, S3_PUT_HASH);
    cnx__sigv4_hex_sha256(NULL, 0, hash);
    assert_string_equal(hash, S3_EMPTY);
    for (size_t i = 0; i < sizeof(s3_examples) / sizeof(s3_examples[0]); i++)
        check_vector(&s3_examples[i], "AKIAIOSFODNN7EXAMPLE",
                     "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                     "20130524T000000Z", "us-east-1", "s3", 0);
}

/* ---- pieces of the canonical request ----------------------------------- */

/* The canonical request's URI and query lines for one path and query. */
static void canonical_lines(const char *path, const char *query, int normalize,
                            char *uri, char *q, size_t cap)
{
    cnx__sigv4_header h[] = {{"Host", "h"}};
    cnx__sigv4_request req = {"GET", path, query, h, 1, S3_EMPTY, normalize};
    char *creq = NULL;
    assert_int_equal(cnx__sigv4_canonical_request(&req, &creq), 0);
    const char *a = strchr(creq, '\n') + 1;
    const char *b = strchr(a, '\n') + 1;
    const char *c = strchr(b, '\n');
    assert_true((size_t)(b - a) <= cap && (size_t)(c - b) < cap);
    memcpy(uri, a, (size_t)(b - a - 1));
    uri[b - a - 1] = '\0';
    memcpy(q, b, (size_t)(c - b));
    q[c - b] = '\0';
    free(creq);
}

static void test_sigv4__canonical_query_sorts_and_reencodes(void **state)
{
    static const struct {
        const char *query, *want;
    } cases[] = {
        {"", ""},
        {"b=2&a=1", "a=1&b=2"},
        {"a=2&a=1&a=10", "a=1&a=10&a=2"}, /* same name: by value */
        {"a&b=&c=1", "a=&b=&c=1"},        /* empty values kept */
        {"a&&b=1&", "a=&b=1"},            /* empty pieces dropped */
        {"k=a b", "k=a%20b"},             /* raw space */
        {"k=a+b", "k=a%2Bb"},             /* '+' is a plus */
        {"k=a%2bb", "k=a%2Bb"},           /* hex upper-cased */
        {"k=%7E%41", "k=~A"},             /* over-encoded, undone */
        {"prefix=a/b&delimiter=%2F", "delimiter=%2F&prefix=a%2Fb"},
        {"x=1=2", "x=1%3D2"},           /* first '=' splits */
        {"Z=1&a=1&_=1", "Z=1&_=1&a=1"}, /* byte order */
        {"list-type=2&continuation-token=1%2Fx%3D%3D",
         "continuation-token=1%2Fx%3D%3D&list-type=2"},
    };
    char uri[256], q[256];
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        canonical_lines("/", cases[i].query, 1, uri, q, sizeof(q));
        expect_str(cases[i].query, "query", q, cases[i].want);
    }
}

static void test_sigv4__canonical_uri_normalizes_only_when_asked(void **state)
{
    static const struct {
        const char *path;
        int normalize;
        const char *want;
    } cases[] = {
        {"", 1, "/"},
        {"", 0, "/"},
        {"/a/b/../c/./d", 1, "/a/c/d"},
        {"/a/b/..", 1, "/a/"},
        {"/a/b/.", 1, "/a/b/"},
        {"/../..", 1, "/"},
        {"/a//b//", 1, "/a/b/"},
        {"/a//b//", 0, "/a//b//"}, /* S3: keys may hold "//" */
        {"/a/../b", 0, "/a/../b"},
        {"/k%2fx", 0, "/k%2Fx"},  /* escapes kept, hex upper */
        {"/k%2Fx/../y", 1, "/y"}, /* an escaped '/' is no '/' */
        {"/a%20b", 0, "/a%20b"},  /* encoded once, never twice */
        {"/a b", 0, "/a%20b"},
        {"/100%", 0, "/100%25"}, /* a lone '%' is escaped */
        {"/\xc3\xa9t\xc3\xa9", 0, "/%C3%A9t%C3%A9"},
    };
    char uri[256], q[256];
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        canonical_lines(cases[i].path, "", cases[i].normalize, uri, q,
                        sizeof(uri));
        expect_str(cases[i].path, "uri", uri, cases[i].want);
    }
}

static void test_sigv4__bad_requests_are_einval(void **state)
{
    cnx__sigv4_header h[] = {{"Host", "h"}, {"X-Amz-Date", "20150830T1"}};
    cnx__sigv4_header bad_name[] = {{"Host", "h"}, {"Bad Name", "v"}};
    cnx__sigv4_header empty_name[] = {{"", "v"}};
    char authz[CNX_SIGV4_AUTH_MAX];
    char *out = (char *)"untouched";
    (void)state;
    cnx__sigv4_request ok = {"GET", "/", "", h, 2, S3_EMPTY, 1};
    cnx__sigv4_request req = ok;

    req.path = "relative";
    assert_int_equal(cnx__sigv4_canonical_request(&req, &out), CNX_EINVAL);
    assert_null(out);
    assert_non_null(strstr(cnx_error_last()->message, "path"));
    req = ok;
    req.query = "a=%zz";
    assert_int_equal(cnx__sigv4_canonical_request(&req, &out), CNX_EINVAL);
    req.query = "a=%4";
    assert_int_equal(cnx__sigv4_canonical_request(&req, &out), CNX_EINVAL);
    req = ok;
    req.payload_hash = "E3B0";
    assert_int_equal(cnx__sigv4_canonical_request(&req, &out), CNX_EINVAL);
    req.payload_hash = "";
    assert_int_equal(cnx__sigv4_canonical_request(&req, &out), CNX_EINVAL);
    req.payload_hash = "UNSIGNED-PAYLOAD";
    assert_int_equal(cnx__sigv4_canonical_request(&req, &out), 0);
    assert_non_null(strstr(out, "\nUNSIGNED-PAYLOAD"));
    free(out);
    req = ok;
    req.method = "GE T";
    assert_int_equal(cnx__sigv4_canonical_request(&req, &out), CNX_EINVAL);
    req = ok;
    req.headers = bad_name;
    assert_int_equal(cnx__sigv4_canonical_request(&req, &out), CNX_EINVAL);
    req.headers = empty_name;
    req.nheaders = 1;
    assert_int_equal(cnx__sigv4_canonical_request(&req, &out), CNX_EINVAL);

    /* Dates, scope parts and keys. */
    static const char *bad_dates[] = {"20150830T123600", "20150830 123600Z",
                                      "2015083OT123600Z", "",
                                      "20150830T123600Z0"};
    for (size_t i = 0; i < sizeof(bad_dates) / sizeof(bad_dates[0]); i++) {
        assert_int_equal(cnx__sigv4_string_to_sign(&ok, bad_dates[i],
                                                   "us-east-1", "s3", &out),
                         CNX_EINVAL);
        assert_int_equal(cnx__sigv4_authorization(&ok, "AK", "SK", bad_dates[i],
                                                  "us-east-1", "s3", authz),
                         CNX_EINVAL);
        assert_string_equal(authz, "");
    }
    assert_int_equal(cnx__sigv4_string_to_sign(&ok, "20150830T123600Z",
                                               "us/east", "s3", &out),
                     CNX_EINVAL);
    assert_int_equal(cnx__sigv4_string_to_sign(&ok, "20150830T123600Z",
                                               "us-east-1", "", &out),
                     CNX_EINVAL);
    assert_int_equal(cnx__sigv4_authorization(&ok, "AK,x", "SK",
                                              "20150830T123600Z", "us-east-1",
                                              "s3", authz),
                     CNX_EINVAL);
    assert_int_equal(cnx__sigv4_authorization(&ok, "", "SK", "20150830T123600Z",
                                              "us-east-1", "s3", authz),
                     CNX_EINVAL);
    assert_int_equal(cnx__sigv4_authorization(&ok, "AK", "", "20150830T123600Z",
                                              "us-east-1", "s3", authz),
                     CNX_EINVAL);
    /* The secret never reaches a message. */
    assert_int_equal(cnx__sigv4_authorization(&ok, "AK", "s3cr3t\n", "bad",
                                              "us-east-1", "s3", authz),
                     CNX_EINVAL);
    assert_null(strstr(cnx_error_last()->message, "s3cr3t"));
}

static void test_sigv4__authorization_too_long_is_einval(void **state)
{
    enum { N = 200 };
    static char names[N][24];
    cnx__sigv4_header h[N];
    char authz[CNX_SIGV4_AUTH_MAX];
    (void)state;
    for (unsigned i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "x-amz-meta-%03u", i);
        h[i].name = names[i];
        h[i].value = "v";
    }
    cnx__sigv4_request req = {"PUT", "/k", "", h, N, S3_EMPTY, 0};
    assert_int_equal(cnx__sigv4_authorization(&req, "AK", "SK",
                                              "20150830T123600Z", "us-east-1",
                                              "s3", authz),
                     CNX_EINVAL);
    assert_string_equal(authz, "");
    req.nheaders = 20;
    assert_int_equal(cnx__sigv4_authorization(&req, "AK", "SK",
                                              "20150830T123600Z", "us-east-1",
                                              "s3", authz),
                     0);
    assert_true(strlen(authz) < CNX_SIGV4_AUTH_MAX);
}

static void test_sigv4__uri_encode(void **state)
{
    static const struct {
        const char *in;
        int keep_slash;
        const char *want;
    } cases[] = {
        {"", 0, ""},
        {"-._~AZaz09", 0, "-._~AZaz09"},
        {"a/b c", 1, "a/b%20c"},
        {"a/b c", 0, "a%2Fb%20c"},
        {"test$file.text", 1, "test%24file.text"},
        {"+=&?#%", 0, "%2B%3D%26%3F%23%25"},
        {"\xe1\x88\xb4", 0, "%E1%88%B4"},
        {"\x01\x7f\xff", 0, "%01%7F%FF"},
    };
    char out[64];
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(cnx__sigv4_uri_encode(cases[i].in, cases[i].keep_slash,
                                               out, sizeof(out)),
                         0);
        assert_string_equal(out, cases[i].want);
    }
    /* Exactly fits (with its NUL), then one byte short. */
    assert_int_equal(cnx__sigv4_uri_encode("a b", 0, out, 6), 0);
    assert_string_equal(out, "a%20b");
    assert_int_equal(cnx__sigv4_uri_encode("a b", 0, out, 5), CNX_ERANGE);
    assert_string_equal(out, "");
    assert_int_equal(cnx__sigv4_uri_encode("", 0, out, 0), CNX_ERANGE);
}

static void test_sigv4__amz_date(void **state)
{
    char d[17];
    (void)state;
    cnx__sigv4_amz_date(1440938160, d);
    assert_string_equal(d, "20150830T123600Z");
    cnx__sigv4_amz_date(1369353600, d);
    assert_string_equal(d, "20130524T000000Z");
    cnx__sigv4_amz_date(0, d);
    assert_string_equal(d, "19700101T000000Z");
    cnx__sigv4_amz_date(951868799, d); /* leap day, last second */
    assert_string_equal(d, "20000229T235959Z");
}

/* ---- AWS configuration ------------------------------------------------- */

static const char *aws_vars[] = {
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN", "AWS_PROFILE",
    "AWS_REGION",        "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL",  "AWS_ENDPOINT_URL_S3",
    "AWS_CONFIG_FILE",   "AWS_SHARED_CREDENTIALS_FILE"};

typedef struct cfg_fixture {
    char dir[64];
    char creds[128];
    char config[128];
    char *old_home;
} cfg_fixture;

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

/* A clean AWS environment whose files live in a fresh directory (HOME
 * too, so the developer's own ~/.aws is never read). */
static int cfg_setup(void **state)
{
    cfg_fixture *fx = calloc(1, sizeof(*fx));
    assert_non_null(fx);
    for (size_t i = 0; i < sizeof(aws_vars) / sizeof(aws_vars[0]); i++)
        unsetenv(aws_vars[i]);
    cnx_test_tmpdir(fx->dir);
    snprintf(fx->creds, sizeof(fx->creds), "%s/credentials", fx->dir);
    snprintf(fx->config, sizeof(fx->config), "%s/config", fx->dir);
    const char *home = getenv("HOME");
    fx->old_home = home ? strdup(home) : NULL;
    setenv("HOME", fx->dir, 1);
    setenv("AWS_SHARED_CREDENTIALS_FILE", fx->creds, 1);
    setenv("AWS_CONFIG_FILE", fx->config, 1);
    *state = fx;
    return 0;
}

static int cfg_teardown(void **state)
{
    cfg_fixture *fx = *state;
    for (size_t i = 0; i < sizeof(aws_vars) / sizeof(aws_vars[0]); i++)
        unsetenv(aws_vars[i]);
    if (fx->old_home)
        setenv("HOME", fx->old_home, 1);
    else
        unsetenv("HOME");
    free(fx->old_home);
    cnx_test_rmtree(fx->dir);
    free(fx);
    return 0;
}

static const char creds_text[] =
    "# shared credentials\n"
    "[default]\n"
    "aws_access_key_id = AKIADEFAULT\n"
    "aws_secret_access_key = secret-default\n"
    "\n"
    "; another profile\n"
    "[other]\n"
    "  aws_access_key_id=AKIAOTHER  \n"
    "AWS_SECRET_ACCESS_KEY = secret-other\r\n"
    "aws_session_token = token-other # inline comment\n";

static void test_aws_config__missing_files_mean_no_credentials(void **state)
{
    cnx__aws_config cfg;
    (void)state;
    assert_int_equal(cnx__aws_config_load(&cfg), 0);
    assert_string_equal(cfg.access_key, "");
    assert_string_equal(cfg.secret_key, "");
    assert_string_equal(cfg.session_token, "");
    assert_string_equal(cfg.region, "us-east-1");
    assert_string_equal(cfg.endpoint, "");
    assert_string_equal(cfg.profile, "default");
    assert_string_equal(cfg.source, "none");
    /* Nor is a HOME without .aws, with the file variables unset. */
    unsetenv("AWS_SHARED_CREDENTIALS_FILE");
    unsetenv("AWS_CONFIG_FILE");
    assert_int_equal(cnx__aws_config_load(&cfg), 0);
    assert_string_equal(cfg.access_key, "");
}

static void test_aws_config__profile_selects_the_section(void **state)
{
    cfg_fixture *fx = *state;
    cnx__aws_config cfg;
    char want[192];
    write_file(fx->creds, creds_text);
    assert_int_equal(cnx__aws_config_load(&cfg), 0);
    assert_string_equal(cfg.access_key, "AKIADEFAULT");
    assert_string_equal(cfg.secret_key, "secret-default");
    assert_string_equal(cfg.session_token, "");
    snprintf(want, sizeof(want), "%s [default]", fx->creds);
    assert_string_equal(cfg.source, want);

    setenv("AWS_PROFILE", "other", 1);
    assert_int_equal(cnx__aws_config_load(&cfg), 0);
    assert_string_equal(cfg.access_key, "AKIAOTHER");
    assert_string_equal(cfg.secret_key, "secret-other");
    assert_string_equal(cfg.session_token, "token-other");
    assert_string_equal(cfg.profile, "other");
    snprintf(want, sizeof(want), "%s [other]", fx->creds);
    assert_string_equal(cfg.source, want);

    /* A profile named but found nowhere is a mistake worth a message. */
    setenv("AWS_PROFILE", "nosuch", 1);
    assert_int_equal(cnx__aws_config_load(&cfg), CNX_EINVAL);
    assert_non_null(strstr(cnx_error_last()->message, "nosuch"));
}

static void test_aws_config__default_home_files(void **state)
{
    cfg_fixture *fx = *state;
    cnx__aws_config cfg;
    char path[160];
    unsetenv("AWS_SHARED_CREDENTIALS_FILE");
    unsetenv("AWS_CONFIG_FILE");
    snprintf(path, sizeof(path), "%s/.aws", fx->dir);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(path, sizeof(path), "%s/.aws/credentials", fx->dir);
    write_file(path, creds_text);
    snprintf(path, sizeof(path), "%s/.aws/config", fx->dir);
    write_file(path, "[default]\nregion = ap-south-1\n");
    assert_int_equal(cnx__aws_config_load(&cfg), 0);
    assert_string_equal(cfg.access_key, "AKIADEFAULT");
    assert_string_equal(cfg.region, "ap-south-1");
}

static void test_aws_config__environment_overrides_files(void **state)
{
    cfg_fixture *fx = *state;
    cnx__aws_config cfg;
    write_file(fx->creds, creds_text);
    setenv("AWS_ACCESS_KEY_ID", "AKIAENV", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "secret-env", 1);
    setenv("AWS_SESSION_TOKEN", "token-env", 1);
    assert_int_equal(cnx__aws_config_load(&cfg), 0);
    assert_string_equal(cfg.access_key, "AKIAENV");
    assert_string_equal(cfg.secret_key, "secret-env");
    assert_string_equal(cfg.session_token, "token-env");
    assert_string_equal(cfg.source, "environment");

    /* Half a key pair is refused, and says which variables. */
    unsetenv("AWS_SECRET_ACCESS_KEY");
    assert_int_equal(cnx__aws_config_load(&cfg), CNX_EINVAL);
    assert_non_null(strstr(cnx_error_last()->message, "AWS_SECRET_ACCESS_KEY"));
    /* An empty variable counts as unset. */
    setenv("AWS_ACCESS_KEY_ID", "", 1);
    assert_int_equal(cnx__aws_config_load(&cfg), 0);
    assert_string_equal(cfg.access_key, "AKIADEFAULT");
    assert_string_equal(cfg.session_token, "");
}

static void test_aws_config__malformed_line_names_file_and_line(void **state)
{
    cfg_fixture *fx = *state;
    cnx__aws_config cfg;
    char want[192];
    static const struct {
        const char *text;
        int line;
    } cases[] = {
        {"[default]\naws_secret_access_key = hunter2-secret\ngarbage\n", 3},
        {"aws_access_key_id = AKIA\n[default]\n", 1},
        {"[default]\n[unterminated\n", 2},
        {"[]\n", 1},
        {"[default] trailing\n", 1},
        {"[default]\n = hunter2-secret\n", 2},
        {"[default]\naws access key = x\n", 2},
        {"# c\n\n[default]\nregion = x\nkey: hunter2-secret\n", 5},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        write_file(fx->creds, cases[i].text);
        memset(&cfg, 'x', sizeof(cfg));
        assert_int_equal(cnx__aws_config_load(&cfg), CNX_EINVAL);
        snprintf(want, sizeof(want), "%s:%d:", fx->creds, cases[i].line);
        const char *msg = cnx_error_last()->message;
        if (strstr(msg, want) == NULL) {
            print_error("case %zu: message \"%s\" lacks \"%s\"\n", i, msg,
                        want);
            fail();
        }
        assert_null(strstr(msg, "hunter2"));
        assert_int_equal(cnx_error_last()->retriable, 0);
        assert_string_equal(cfg.secret_key, "");
    }
    /* The config file is checked the same way. */
    unlink(fx->creds);
    write_file(fx->config, "[default]\nregion = us-west-2\n!\n");
    assert_int_equal(cnx__aws_config_load(&cfg), CNX_EINVAL);
    snprintf(want, sizeof(want), "%s:3:", fx->config);
    assert_non_null(strstr(cnx_error_last()->message, want));
}

static void test_aws_config__over_long_value_is_einval(void **state)
{
    cfg_fixture *fx = *state;
    cnx__aws_config cfg;
    char text[512], want[192];
    char secret[201];
    memset(secret, 'S', sizeof(secret) - 1);
    secret[sizeof(secret) - 1] = '\0';
    snprintf(text, sizeof(text),
             "[default]\naws_access_key_id = AKIA\naws_secret_access_key = "
             "%s\n",
             secret);
    write_file(fx->creds, text);
    assert_int_equal(cnx__aws_config_load(&cfg), CNX_EINVAL);
    snprintf(want, sizeof(want), "%s:3: aws_secret_access_key", fx->creds);
    assert_non_null(strstr(cnx_error_last()->message, want));
    assert_null(strstr(cnx_error_last()->message, "SSSS"));
    /* Likewise from the environment, naming the variable. */
    setenv("AWS_ACCESS_KEY_ID", "AKIA", 1);
    setenv("AWS_SECRET_ACCESS_KEY", secret, 1);
    assert_int_equal(cnx__aws_config_load(&cfg), CNX_EINVAL);
    assert_non_null(strstr(cnx_error_last()->message, "AWS_SECRET_ACCESS_KEY"));
    assert_null(strstr(cnx_error_last()->message, "SSSS"));
    /* Half a pair in a file is refused too. */
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    write_file(fx->creds, "[default]\naws_access_key_id = AKIA\n");
    assert_int_equal(cnx__aws_config_load(&cfg), CNX_EINVAL);
}

static void test_aws_config__region_precedence(void **state)
{
    cfg_fixture *fx = *state;
    cnx__aws_config cfg;
    write_file(fx->config, "[default]\n"
                           "region = eu-central-1\n"
                           "s3 =\n"
                           "    addressing_style = path\n"
                           "    region = not-this\n"
                           "[profile other]\n"
                           "region = eu-west-1 ; the other one\n"
                           "[other]\n"
                           "region = not-this-either\n");
    assert_int_equal(cnx__aws_config_load(&cfg), 0);
    assert_string_equal(cfg.region, "eu-central-1");
    setenv("AWS_PROFILE", "other", 1);
    assert_int_equal(cnx__aws_config_load(&cfg), 0);
    assert_string_equal(cfg.region, "eu-west-1");
    assert_string_equal(cfg.access_key, ""); /* no keys: unsigned */
    setenv("AWS_DEFAULT_REGION", "us-west-1", 1);
    assert_int_equal(cnx__aws_config_load(&cfg), 0);
    assert_string_equal(cfg.region, "us-west-1");
    setenv("AWS_REGION", "us-west-2", 1);
    assert_int_equal(cnx__aws_config_load(&cfg), 0);
    assert_string_equal(cfg.region, "us-west-2");
}

static void test_aws_config__endpoint_precedence(void **state)
{
    cfg_fixture *fx = *state;
    cnx__aws_config cfg;
    write_file(fx->config, "[profile minio]\n"
                           "endpoint_url = http://127.0.0.1:9000\n"
                           "aws_access_key_id = minioadmin\n"
                           "aws_secret_access_key = minio-secret\n");
    setenv("AWS_PROFILE", "minio", 1);
    assert_int_equal(cnx__aws_config_load(&cfg), 0);
    assert_string_equal(cfg.endpoint, "http://127.0.0.1:9000");
    /* Keys in the config file serve when the credentials file has none. */
    assert_string_equal(cfg.access_key, "minioadmin");
    assert_string_equal(cfg.secret_key, "minio-secret");
    setenv("AWS_ENDPOINT_URL", "http://all.example", 1);
    assert_int_equal(cnx__aws_config_load(&cfg), 0);
    assert_string_equal(cfg.endpoint, "http://all.example");
    setenv("AWS_ENDPOINT_URL_S3", "http://s3.example", 1);
    assert_int_equal(cnx__aws_config_load(&cfg), 0);
    assert_string_equal(cfg.endpoint, "http://s3.example");
    unsetenv("AWS_ENDPOINT_URL");
    assert_int_equal(cnx__aws_config_load(&cfg), 0);
    assert_string_equal(cfg.endpoint, "http://s3.example");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigv4__aws_test_suite),
        cmocka_unit_test(test_sigv4__s3_documentation_examples),
        cmocka_unit_test(test_sigv4__canonical_query_sorts_and_reencodes),
        cmocka_unit_test(test_sigv4__canonical_uri_normalizes_only_when_asked),
        cmocka_unit_test(test_sigv4__bad_requests_are_einval),
        cmocka_unit_test(test_sigv4__authorization_too_long_is_einval),
        cmocka_unit_test(test_sigv4__uri_encode),
        cmocka_unit_test(test_sigv4__amz_date),
        cmocka_unit_test_setup_teardown(
            test_aws_config__missing_files_mean_no_credentials, cfg_setup,
            cfg_teardown),
        cmocka_unit_test_setup_teardown(
            test_aws_config__profile_selects_the_section, cfg_setup,
            cfg_teardown),
        cmocka_unit_test_setup_teardown(test_aws_config__default_home_files,
                                        cfg_setup, cfg_teardown),
        cmocka_unit_test_setup_teardown(
            test_aws_config__environment_overrides_files, cfg_setup,
            cfg_teardown),
        cmocka_unit_test_setup_teardown(
            test_aws_config__malformed_line_names_file_and_line, cfg_setup,
            cfg_teardown),
        cmocka_unit_test_setup_teardown(
            test_aws_config__over_long_value_is_einval, cfg_setup,
            cfg_teardown),
        cmocka_unit_test_setup_teardown(test_aws_config__region_precedence,
                                        cfg_setup, cfg_teardown),
        cmocka_unit_test_setup_teardown(test_aws_config__endpoint_precedence,
                                        cfg_setup, cfg_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
