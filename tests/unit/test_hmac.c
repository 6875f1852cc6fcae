/*
 * test_hmac.c — SHA-256 and HMAC-SHA256 (libax core/hmac.c) against the
 * published vectors: FIPS 180-4 / NIST CAVP examples for SHA-256 (the empty
 * string, "abc", the 448-bit and 896-bit messages, one million 'a'),
 * RFC 4231 test cases 1-7 for HMAC-SHA256 (case 5 truncated to 128 bits as
 * in the RFC), padding-boundary lengths, and 64 pseudo-random (key, message)
 * pairs whose expected digests were computed once with python3's hashlib
 * and hmac and pasted here (the key and message bytes come from the
 * xorshift64* generator below, which the generator script mirrored).
 * Streaming in odd chunk sizes must equal the one-shot functions.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ax/hmac.h"

static void hex_of(const unsigned char *d, size_t n, char *out) { ax_hex_encode(d, n, out); }

static void check_sha(const void *msg, size_t len, const char *want) {
    unsigned char d[AX_SHA256_LEN];
    char hex[AX_SHA256_HEX_LEN];
    ax_sha256(msg, len, d);
    hex_of(d, sizeof d, hex);
    assert_string_equal(hex, want);
    /* the same in chunks of 1, 3, 63, 64 and 65 bytes */
    static const size_t chunks[] = {1, 3, 63, 64, 65};
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        ax_sha256_t ctx;
        ax_sha256_init(&ctx);
        const unsigned char *p = msg;
        for (size_t off = 0; off < len; off += chunks[c])
            ax_sha256_update(&ctx, p + off, len - off < chunks[c] ? len - off : chunks[c]);
        ax_sha256_final(&ctx, d);
        hex_of(d, sizeof d, hex);
        assert_string_equal(hex, want);
    }
}

static void check_hmac(const void *key, size_t keylen, const void *msg, size_t len,
                       const char *want) {
    unsigned char d[AX_SHA256_LEN];
    char hex[AX_SHA256_HEX_LEN];
    size_t wl = strlen(want);
    ax_hmac_sha256(key, keylen, msg, len, d);
    hex_of(d, sizeof d, hex);
    hex[wl] = '\0'; /* RFC 4231 case 5 compares a truncated MAC */
    assert_string_equal(hex, want);
    static const size_t chunks[] = {1, 7, 64};
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        ax_hmac_sha256_t ctx;
        ax_hmac_sha256_init(&ctx, key, keylen);
        const unsigned char *p = msg;
        for (size_t off = 0; off < len; off += chunks[c])
            ax_hmac_sha256_update(&ctx, p + off, len - off < chunks[c] ? len - off : chunks[c]);
        ax_hmac_sha256_final(&ctx, d);
        hex_of(d, sizeof d, hex);
        hex[wl] = '\0';
        assert_string_equal(hex, want);
    }
}

/* ---- SHA-256: FIPS 180-4 examples ------------------------------------- */

static void test_sha256_empty(void **state) {
    check_sha("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

static void test_sha256_abc(void **state) {
    check_sha("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

static void test_sha256_448(void **state) {
    static const char m[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    assert_int_equal(strlen(m) * 8, 448);
    check_sha(m, strlen(m), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

static void test_sha256_896(void **state) {
    static const char m[] = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn"
                            "hijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
    assert_int_equal(strlen(m) * 8, 896);
    check_sha(m, strlen(m), "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

static void test_sha256_million_a(void **state) {
    size_t n = 1000000;
    char *m = malloc(n);
    assert_non_null(m);
    memset(m, 'a', n);
    check_sha(m, n, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(m);
}

/* Lengths around the padding boundaries (55/56 bytes leave no room for the
 * length; 64 is a full block): message byte i is i % 251. */
static void test_sha256_lengths(void **state) {
    static const struct {
        size_t n;
        const char *want;
    } v[] = {
    {1, "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"},
    {55, "463eb28e72f82e0a96c0a4cc53690c571281131f672aa229e0d45ae59b598b59"},
    {56, "da2ae4d6b36748f2a318f23e7ab1dfdf45acdc9d049bd80e59de82a60895f562"},
    {57, "2fe741af801cc238602ac0ec6a7b0c3a8a87c7fc7d7f02a3fe03d1c12eac4d8f"},
    {63, "29af2686fd53374a36b0846694cc342177e428d1647515f078784d69cdb9e488"},
    {64, "fdeab9acf3710362bd2658cdc9a29e8f9c757fcf9811603a8c447cd1d9151108"},
    {65, "4bfd2c8b6f1eec7a2afeb48b934ee4b2694182027e6d0fc075074f2fabb31781"},
    {111, "60780e9451bdc43cf4530ffc95cbb0c4eb24dae2c39f55f334d679e076c08065"},
    {112, "09373f127d34e61dbbaa8bc4499c87074f2ddb10e1b465f506d7d70a15011979"},
    {119, "da18797ed7c3a777f0847f429724a2d8cd5138e6ed2895c3fa1a6d39d18f7ec6"},
    {120, "f52b23db1fbb6ded89ef42a23ce0c8922c45f25c50b568a93bf1c075420bbb7c"},
    {127, "92ca0fa6651ee2f97b884b7246a562fa71250fedefe5ebf270d31c546bfea976"},
    {128, "471fb943aa23c511f6f72f8d1652d9c880cfa392ad80503120547703e56a2be5"},
    {129, "5099c6a56203f9687f7d33f4bfdf576d31dc91f6b695ecea38b2770c87631135"},
    {1000, "4e4c294b331f7a2099a379bec34b9f9fc03dc46ab465d998f4d683da53487e6d"},
    };
    unsigned char m[1000];
    for (size_t i = 0; i < sizeof m; i++)
        m[i] = (unsigned char)(i % 251);
    for (size_t k = 0; k < sizeof v / sizeof v[0]; k++)
        check_sha(m, v[k].n, v[k].want);
}

/* ---- HMAC-SHA256: RFC 4231 section 4 ---------------------------------- */

static void test_rfc4231_1(void **state) {
    unsigned char key[20];
    memset(key, 0x0b, sizeof key);
    check_hmac(key, sizeof key, "Hi There", 8,
               "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
}

static void test_rfc4231_2(void **state) {
    check_hmac("Jefe", 4, "what do ya want for nothing?", 28,
               "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

static void test_rfc4231_3(void **state) {
    unsigned char key[20], msg[50];
    memset(key, 0xaa, sizeof key);
    memset(msg, 0xdd, sizeof msg);
    check_hmac(key, sizeof key, msg, sizeof msg,
               "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
}

static void test_rfc4231_4(void **state) {
    unsigned char key[25], msg[50];
    for (size_t i = 0; i < sizeof key; i++)
        key[i] = (unsigned char)(i + 1);
    memset(msg, 0xcd, sizeof msg);
    check_hmac(key, sizeof key, msg, sizeof msg,
               "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
}

static void test_rfc4231_5(void **state) {
    unsigned char key[20];
    memset(key, 0x0c, sizeof key);
    check_hmac(key, sizeof key, "Test With Truncation", 20, "a3b6167473100ee06e0c796c2955552b");
}

static void test_rfc4231_6(void **state) {
    unsigned char key[131];
    memset(key, 0xaa, sizeof key);
    static const char m[] = "Test Using Larger Than Block-Size Key - Hash Key First";
    check_hmac(key, sizeof key, m, strlen(m),
               "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

static void test_rfc4231_7(void **state) {
    unsigned char key[131];
    memset(key, 0xaa, sizeof key);
    static const char m[] =
        "This is a test using a larger than block-size key and a larger than block-size data. "
        "The key needs to be hashed before being used by the HMAC algorithm.";
    check_hmac(key, sizeof key, m, strlen(m),
               "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

/* ---- pseudo-random cross-check (expected values from python3) --------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rng(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

/* For each: key length, message length, SHA-256(message),
 * HMAC-SHA256(key, message). Drawn in this order: key length % 200,
 * message length % 600, the key bytes, the message bytes (low byte of each
 * draw). */
static const struct {
    size_t keylen, len;
    const char *sha, *mac;
} rnd[] = {
    {10, 287, "a3902d24e21f3026460b7b6a7d70a3a94a8ec7eb57c7bc893177e824659672f4",
     "9c7cdb85148db010aaec0e552e779ccb068cb8817da397886844b3102cd8b793"},
    {10, 178, "8e44728a165c2c0c43aa7818ae90e3bd667cbaae72071bb4d1cea55d8ef34dfe",
     "f43e39d63538cff3f5cc5176dfdc463369ce995074ee4c21b5f7cdf9d553c48b"},
    {127, 155, "f10acf44f92a2d9fad1e9ab21131c1f9dc3afc4770d9aaf9868cb41d904a9e20",
     "5e1e6326e82ac2269461564a491342985594d45ba24bc31766bab1447aa86d97"},
    {151, 439, "054e40c65dabd7c4fb8ecc01123c8d526cc8863e507fa71b0f191c7c6f168e5e",
     "f5c527eea6eedb195f5f30faf07c052422552109678d71c588a73879dd52f1da"},
    {105, 122, "ed5d3fd1b215775a35cd22082d03891abdf1e6b161264454819a19be15b1b4a4",
     "6b74543a1abf5dfb4d6c5660c0ca11e91f24b7aa2472f64bb981eb4bf419e4b3"},
    {108, 240, "1a701f62bc9622e606cdcbf41f220de88a8772dedfe99bb6b0d2e81ed4620008",
     "42b0920feff9c39b78d81e8a03e3d50d9a64f6d88d2555089dac573e446f0002"},
    {147, 203, "a807584dd2a77b9a4579c76f63d495a973399808eb89f92fc3990cdeb7a6349b",
     "9840d7f9693fd2e3b16fc5fe47076e6a0ab428fd40a0b58dd68730b14278925c"},
    {69, 334, "9365b992ba994ffef439ad8bb733609499d09a901db63575b0bb0915b9db4bae",
     "8af76d71b2de28e2d84a0ca694eafc8bdd26833ec524230f01e4c0a29b455b50"},
    {90, 77, "ba79b2cc3c94913c96f63991ff5b84d1f380836ebc534be163b693ec7e7427e4",
     "5530db14337d7708c6813c5083abae4ab0dca14e388e7a79583110ba40c86586"},
    {44, 317, "b28a045eed7ff78660cb74ce6d6b82dcd018888d6f5b79d1ede5a7ce6b1cf687",
     "2ec8baa54919adf0c19ec182b1040eb589c5b452c54bd09a94c0810616d095ed"},
    {83, 261, "68c1d880afc45e3fa75861da640dcdf0f9ce28f41db47414de0f318351f6ef35",
     "f24b609ac01c10759ca308e96302efd056d09558245536f399583d52dcbea11c"},
    {82, 266, "cf7aa99bafd003d5b504dce257aea0de2aab44cb9d38f6dd068a53ba76e66080",
     "b645698e329e8b9920bc2d394e2521341585b088d6b30e04323609ee2bd46401"},
    {150, 93, "4f716b9fd2c14eefd38473727678e39f837d236d804823d90c86ad1a8cb7c723",
     "60cca39dfdc2b768a4025eb53e4264b52cb48f5fa0a5dbd8ef24f00dee22b345"},
    {56, 435, "6589994175a2c332f4ecf1b2b5be1a4cf9a81b3a63e12e32546c66489d666936",
     "6ab029eca3a6879c4cadd715358b19e91b869d4faaa42825f2cb029c6755fa4a"},
    {124, 121, "b369f451e9973248f6a3c01dd893d2f3f85d2dfff7723d2e1b4622e89e560589",
     "7d80483e9afb0f91f3762f693cde378f6dc29f103984ac628387fcabbcc7a545"},
    {100, 67, "b8f392038af2fc3ad547acf35af01ae0f563b9e3897f34661b5b3546178983be",
     "365c5b353e9c03174d687d20a8cbb3eae18b8f7f09fd4a78c7934ad6a0ec164b"},
    {167, 91, "f64d0f87da8ba689fbef2a0b4bfc4cab07c187da8dd41846c0ca7e559ff6c779",
     "f0188e8f63289ff59464d824e93243af050e262b45fdcb3869dd37f89b7e0a20"},
    {176, 455, "32e1f408a3086b932fae220e4bbfeaf8544e32caf8a77cb198ca5870f9b42410",
     "776da39190da406d370f755dd8475fd4adbb600f73fdcad3d028e42269f6f776"},
    {31, 22, "30255bcd0124a90220c388e4696272eb85192f61074f509e03c2683e08d50793",
     "8f97fab2e6fc9980b23109cac6aa0e891bb4ba91426e5f39ea6c5be6f0cf627c"},
    {63, 98, "2d140e59ac09ad49c9acc367c03f48d73d0720ed2f6c78aab4e7af620e447d0d",
     "4c02ce2f68f86caf223a27f2dd830aa0262bc8ab1247716ee84fab84353848b8"},
    {90, 320, "6a0a58a19c054c06dbef007fe9b63beb58b3619e05c1c4746c8728cb838a07a7",
     "bdc16f57ca0c193bdb2d09dfb25eb293d3b094ed6daf829221d70f481197fc17"},
    {72, 322, "15a2de9da885d75c13df90fffed68ce15459ef94d8aee72cf3e62d03c61eaf44",
     "cdd2e16aebcce919d1a9d47bd9bb8b334c4991fdf7b6d3d578c198369d2d1c4a"},
    {44, 414, "0caced36170cdfd6398f443f6d6f37e84caaee0ecf57bab5932c34b26636dedd",
     "74f5b8d26b62849fc1cf86e5b9685296fc796451e242eb2c7f2a813420f58134"},
    {50, 179, "194feb44dd5bb2d9e386782ebe5280b0a534feaa218e915a78bcdc1d275fc147",
     "1982fc26567da8f2008c9782368d0b24f89e704b58419db1e96d0dbb3e073882"},
    {127, 135, "19311daafd3f9dd13b5db3c0766820f3c704cabf78029ebbf6c92a3cb0207523",
     "f3b29be4a4be37a0d0a73aac34e971909191478ba8c7529a95e5a6bab1ec4005"},
    {176, 509, "c435108bb03d3e38d2183947b0c5a013adbb6cfafe4df5f4cab6f584f8e8b69f",
     "ca1521b20cf119444998ef3af75d216891c63bff5b1cadd89249898b026dfe5c"},
    {147, 320, "358d7c6969a52fab58e103a86835bb5b451393f565a304a5188601bd552703b6",
     "88ae16188f7222a463519d606201055a1acc107a67f1167c4f2a815b7876ad45"},
    {79, 414, "fd462de6b5c91264477e4e9b29b67b073a37e275f4845c62701d6ffb45e11d83",
     "d811546c7a4798faeddf96e62baab72c6f8ba56fe801d3fed56cf62251b28123"},
    {23, 93, "96cefa30f3a7d7d55fca25c0ca8861ee9fc1e3581a9d86b349fa2739f37b95a0",
     "53767c7887b831cdffe0525505bd48c9fa559692cde3866032a56b999c590370"},
    {134, 463, "cd8a3013f49aa2427395b859a9cf98f5d36bfd3c0f44c4da38776b3d6a9df7d5",
     "254c29bf3b23f62dc182c185e6f8169f8c55a70f8af97cc3fb92328f70060725"},
    {9, 535, "648b3fa5f229295bcdd0a84cb6e8bf0d5e780a22215417b665027377b1eb936d",
     "808fd26cc9bcc5d4b0d88be0c0100b91a2a020f07f1513733e4b62d187466397"},
    {140, 111, "d205df5b9e1c626e071e4376b65d0eacb2b686c13a12c575e2b5fed6a2a541e6",
     "e54a34793d2a3c29bf6274b0e835aff7c8f9a6664cb84b45ea63168abdacfff0"},
    {177, 576, "c6ec90a7966981bf541aed2caceb2111a86583eea28222392c8087f389966741",
     "437959ac28b533d48f682466a7a8df91b60e36ecfaaa1b3777fbc8168590b7e0"},
    {112, 379, "6ff536dd69d6e9d63d7350c580525763daf9e19a215350de703f7606920b7d23",
     "3067efbf4a940d5cd6c7edc280c26fa36a9235114b519a916ed08adf92687dcf"},
    {90, 81, "8848b14db3cc90c9237c074727b264275cfb10e6439910936b665d5aa6d23119",
     "88d5379b1acb1130c976b25eec69a399245aec4a8ec65efd37d189bb38273e23"},
    {96, 420, "1bdbf69f76783ae002d937acb4c0dea9c1c3788f51b09f46efe916873f8ea24e",
     "7a4748f7f5243ae1ccf1062e38dbe956f0aa7e155aafc50ca28460158ccf3b04"},
    {189, 155, "f9a8ac386e96897115e224255ab749106329b2fd67dbbb4066eb9c06f79c9061",
     "b4552dce7e5f182af9cbd07fbd08cc06754a10c530f97c54cdd75add79d6cddb"},
    {107, 229, "7b42689b4619b8f42e42a00c0d7a0712eee701f00d9d4042de3e271e61851b54",
     "94fc4286a3d66c4808dd97102a3da27ce702a5d120ee7abfe8b3f7545e9f70db"},
    {43, 496, "2fbe261ca379bec206af47c21e1aec431810b93c2a8da7afeea4bfbdc3095373",
     "548457a55ccf1bc776350838e3fc8eeb3828ba698ad49087e9a566edc4f0f556"},
    {194, 298, "6ddfc94cdfd5207f5dd1816dad05e3a2e69ff1e12c0434a5d131465a0cd59e42",
     "de52694ffc254feae61bd007a72ab5c8fd5cff98da1ed1625e0770cc001dbffe"},
    {172, 572, "bd18eff094f38093a6a382c520555f18caecfabe5b3d90e151ee0c8f01528be8",
     "c9a16bb9010fff4f54e5dd0c0649d46a9f453fd17c5d42a2bdc3ab9e6d2c65cc"},
    {159, 203, "3a8eede445ee5dc6f9ee085425c0c61024043371be6a62e6d04a4a7cb48a0bfc",
     "46d024bdc4dfeaf8ac22d605a00487240cf2c52c6b0e15843087251ab025ac30"},
    {14, 307, "c1795559c8afc5523b01e4aa7d3023ec7872d20b3d7a9217e052094898f0ac67",
     "f36dc4e4738c0578037b5420e1726e0b821c314ca33e072c3aca678251bb4f2a"},
    {199, 303, "e6b92913a13fd01e2c10491671f7fb9a7f8c048f1e0103da38e59f1008dcc37c",
     "8e82ce54cb801b310fe3718a82c28170a64d2cb657afb164118a4810cb20ed29"},
    {122, 449, "3c380a30de2ad6a0a64b9005f990419ae93483e43cbe3dfd0fac16e340bb65b3",
     "81106f15d78af3609e98b2f88cd69587c1f241b5d0ac4445c290dca817f2d94e"},
    {36, 399, "87f3200510ecf553bbdc15cecd502e0a57fb964d15150a9b0215be9bad67836a",
     "50148864a3c78b25adf88e4a881ff1285dd93e2329eeaa47730bd75ab9d3e04a"},
    {189, 275, "01af41fa02a225d59c08ed319cc50bfe70c2ebea11af18a0525ac080f918904d",
     "c2d47b7da14ccce3c79ac2a4c0475f4a151393aacec40aae5157eb70b6b3d587"},
    {50, 483, "27ce965a4d558e90da5155a6a54ff01e73e7511f41a8b85ddb868ba099109bf7",
     "42f9f690fb5aa251447411eeaa625d8e0cef158f32ee5f4182eeea3f747529ee"},
    {172, 517, "674eb526839937e48bdb71645c3c597fc46256a9f3ea3e08e55fa54831e345d0",
     "305468ddc16359f801c4e918f9fb9f48c38d1445d0ff292c9e2d030ac272798b"},
    {48, 180, "8be05e29322d753ac068978e7a39f5ab597cfbe9e25d7828fd053e111eebf6b6",
     "e4b9047671c56930bb6f918c8f7d20bd67e18d30863942a04c1870e159a70375"},
    {66, 396, "bbbc90b4721b35e2be684542640b7eee890efd47b19292856c9147b14a58e65f",
     "8ec35956666554e5452d9c85592dbc63c42b46d803a06015cb5c542af44d704b"},
    {59, 159, "7632a3a898b850617824b8ce6a1c7e7e90bcce74361a6d50bf517d0e356326d6",
     "90851c54e76441cc9d3a8bcc0406051589ce074507d4ee5c424beaeec8bbbc2a"},
    {16, 263, "4b6a0e4775f7ff061f8485fcd39667e379862901bec565208f7af0d5d15458f2",
     "c195ca73a6ba3d1106c3ccd18a8d54681c89b04a88bdabe8e1919d41f3f40124"},
    {55, 96, "145cebaf09b441b6eaf59b04a0e565a2215cff45fcb0ab2276a2e3be29afdf0b",
     "a7bc7203077af31decff08aa0c1085f3e9ebc0d43d78598fa4da70d77cd8d1f8"},
    {154, 398, "263940edf6c4695a6e4b482a4f1df9e028a2c2490330ee131dda00f19409a419",
     "39e390e8127a617d4aea445a248f38f3be6af7082c400687dc856fe110252489"},
    {113, 68, "66460e41c3d3b9f99faab1cdfd19b66d48379c854821bc1fd452b4746bfc2458",
     "01d43601e6826ff21fd7866f21e6414eef9b682d65c3daaf12b61ed7809ae501"},
    {57, 207, "6e7603e18a930b5b6e847e8afa478feb62d9f1fac52d90c5f4dda18ccd5fd18b",
     "9c1ad0aa6afb07f4f6101f4693d2e288e9c6c4364f6b56750be4ff7e992471b1"},
    {131, 7, "3786300e9c10912210eeb24711df7ae412e787f3a18b8433a771f711bac88cd2",
     "e2c49aead3a8e0ae365ad4611e252a77947c5aa783d39bd8b1e8f91b5a584de7"},
    {151, 573, "2668b1e374969ad749ae60c069ab636b6b1d01c380358979d866f7dc46a09f98",
     "d7bd2161854852e4d47c42e8f878e88cb6478ef5c9e9592f06ef02d1c947eaef"},
    {9, 211, "ff1d1f3795834ffe9ac0bff11897e849f6071cd2da1d01d676124e21f16e2e2a",
     "c75ef439fea26530956ff9a5eee9c3a220f304b5adc6163ffd3ff4606116e763"},
    {98, 352, "3d577ac2348c358268bdd05f34a2b1dd22490a15355387af07daa9d79e4098f4",
     "655aa8232ff3ea66235ee2f883e856394402e1d42973d6115a186fda96d9bec6"},
    {180, 512, "4d96cb3bff5f9cf59810fd9ae28eea29f82d5fd14ce8affb6783c53d1b5e8831",
     "b08fe785784156342e2d3a8d0a5dd27a6912cdeba8c2a3da68c806f541ad3205"},
    {185, 449, "38254af184b0e0d9c463a085b75b0c8931e6250a345cbe5a94b50159811ee2e7",
     "9b320caaabe0dbe6b7493001fe6e9eec781b63707527d6e588e4856d1897b4e1"},
    {120, 577, "c352e22fbf28cf7eabf4a42df0d7e0a1e16c2c1007c59e4466b2fe9ae670c30b",
     "bed8190ab36ce016d5180ec7b2d71883740532d662e42ead573f056fe5183627"},
};

static void test_random_vs_python(void **state) {
    unsigned char key[200], msg[600];
    rng_state = 0x9E3779B97F4A7C15ull;
    for (size_t k = 0; k < sizeof rnd / sizeof rnd[0]; k++) {
        size_t kl = (size_t)(rng() % 200), ml = (size_t)(rng() % 600);
        assert_int_equal(kl, rnd[k].keylen);
        assert_int_equal(ml, rnd[k].len);
        for (size_t i = 0; i < kl; i++)
            key[i] = (unsigned char)rng();
        for (size_t i = 0; i < ml; i++)
            msg[i] = (unsigned char)rng();
        check_sha(msg, ml, rnd[k].sha);
        check_hmac(key, kl, msg, ml, rnd[k].mac);
    }
}

/* ---- helpers ------------------------------------------------------------ */

static void test_hex_and_compare(void **state) {
    static const unsigned char b[] = {0x00, 0x01, 0x7f, 0x80, 0xab, 0xff};
    char hex[2 * sizeof b + 1];
    ax_hex_encode(b, sizeof b, hex);
    assert_string_equal(hex, "00017f80abff");
    ax_hex_encode(b, 0, hex);
    assert_string_equal(hex, "");
    assert_true(ax_memeq_ct("abcdef", "abcdef", 6));
    assert_false(ax_memeq_ct("abcdef", "abcdeg", 6));
    assert_false(ax_memeq_ct("xbcdef", "abcdef", 6));
    assert_true(ax_memeq_ct("a", "b", 0));
}

/* A context is reusable after init; a different key gives a different MAC
 * (what a receiver's check relies on). */
static void test_reuse_and_wrong_key(void **state) {
    unsigned char a[AX_SHA256_LEN], b[AX_SHA256_LEN];
    ax_hmac_sha256_t c;
    ax_hmac_sha256_init(&c, "k1", 2);
    ax_hmac_sha256_update(&c, "1700000000.{}", 13);
    ax_hmac_sha256_final(&c, a);
    ax_hmac_sha256_init(&c, "k1", 2);
    ax_hmac_sha256_update(&c, "1700000000.{}", 13);
    ax_hmac_sha256_final(&c, b);
    assert_memory_equal(a, b, sizeof a);
    ax_hmac_sha256("k2", 2, "1700000000.{}", 13, b);
    assert_false(ax_memeq_ct(a, b, sizeof a));
    ax_hmac_sha256("k1", 2, "1700000001.{}", 13, b);
    assert_false(ax_memeq_ct(a, b, sizeof a));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_empty),     cmocka_unit_test(test_sha256_abc),
        cmocka_unit_test(test_sha256_448),       cmocka_unit_test(test_sha256_896),
        cmocka_unit_test(test_sha256_million_a), cmocka_unit_test(test_sha256_lengths),
        cmocka_unit_test(test_rfc4231_1),        cmocka_unit_test(test_rfc4231_2),
        cmocka_unit_test(test_rfc4231_3),        cmocka_unit_test(test_rfc4231_4),
        cmocka_unit_test(test_rfc4231_5),        cmocka_unit_test(test_rfc4231_6),
        cmocka_unit_test(test_rfc4231_7),        cmocka_unit_test(test_random_vs_python),
        cmocka_unit_test(test_hex_and_compare),  cmocka_unit_test(test_reuse_and_wrong_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
