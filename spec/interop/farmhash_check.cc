// farmhash_check.cc — wisp_fingerprint64 against Debian's libfarmhash (util::Fingerprint64) on random bytes of every length 0..1100; run by `make test-interop`.
#include <farmhash.h>
#include <cinttypes>
#include <cstdio>
#include <cstring>

extern "C" {
uint64_t wisp_fingerprint64(const void *data, size_t len);
}

int main()
{
    static unsigned char buf[1200];
    uint64_t s = 0x9E3779B97F4A7C15ull;
    long checked = 0, wrong = 0;
    for (int round = 0; round < 20; round++) {
        for (size_t i = 0; i < sizeof buf; i++) {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            buf[i] = (unsigned char)(round & 1 ? 'a' + s % 26 : s);
        }
        for (size_t len = 0; len <= 1100; len++) {
            for (size_t off = 0; off < 3; off++) {          // unaligned starts too
                uint64_t want = util::Fingerprint64(reinterpret_cast<const char *>(buf + off), len);
                uint64_t got = wisp_fingerprint64(buf + off, len);
                checked++;
                if (got != want && wrong++ < 5)
                    std::fprintf(stderr, "length %zu offset %zu: wisp %" PRIu64 ", libfarmhash %" PRIu64 "\n", len, off, got, want);
            }
        }
    }
    std::printf("farmhash_check: %ld fingerprints compared with libfarmhash, %ld differ\n", checked, wrong);
    return wrong != 0;
}
