// test_wisp_hpp.cpp — wisp.hpp: parity with `wisp score`, each C failure as the documented wisp::Error, move-only handles.
//
//   test_wisp_hpp PATH/TO/wisp      (prints "cpp: N passed, N failed" last)
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <type_traits>
#include <unistd.h>
#include <vector>

#include "wisp.hpp"

static int passed, failed;
#define CHECK(cond)                                                                 \
    do {                                                                            \
        if (cond) passed++;                                                         \
        else { failed++; std::printf("CHECK failed: %s (line %d)\n", #cond, __LINE__); } \
    } while (0)

/* f() throws wisp::Error with this status */
template <class F>
static bool throws(int status, F f)
{
    try {
        f();
    } catch (const wisp::Error &e) {
        if (e.status() != status) std::printf("  got %s: %s\n", e.name(), e.what());
        return e.status() == status && e.what()[0] != 0;
    }
    std::printf("  nothing thrown\n");
    return false;
}

/* what `wisp score` prints for v (fmt_prob in engine/cli/cli.c) */
static std::string cli_format(float v)
{
    char buf[64];
    if (std::isnan(v)) return "nan";
    if (v >= 0.001f && v <= 1.0f) {
        unsigned long long x = (unsigned long long)std::llround((double)v * 1e9);
        if (x >= 1000000000ull) return "1.000000000";
        std::snprintf(buf, sizeof buf, "0.%09llu", x);
    } else {
        std::snprintf(buf, sizeof buf, "%.9g", (double)v);
    }
    return buf;
}

int main(int argc, char **argv)
{
    const char *cli = argc > 1 ? argv[1] : "build/wisp";
    char dir[] = "/tmp/wisp-cpp-XXXXXX";
    if (!mkdtemp(dir)) { std::perror("mkdtemp"); return 1; }
    std::string model = std::string(dir) + "/m.wisp", text = std::string(dir) + "/rows.libsvm";

    static_assert(!std::is_copy_constructible_v<wisp::Session> && std::is_move_constructible_v<wisp::Session>);
    static_assert(!std::is_copy_assignable_v<wisp::Model> && std::is_nothrow_move_assignable_v<wisp::Batch>);

    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0, 1);
    std::vector<float> w(1000);
    for (auto &x : w) x = nd(rng);
    wisp::Model::write(model, w, -0.25, WISP_F32, "source=cpp-spec\n");

    // rows: sorted unique ids (some beyond the table), values k/256; the same rows as libsvm text
    std::vector<uint32_t> ptr{0}, ids;
    std::vector<float> vals;
    std::string lines;
    for (int r = 0; r < 500; r++) {
        lines += "0";
        uint32_t id = 0;
        int n = (int)(rng() % 15);
        for (int k = 0; k < n; k++) {
            id += 1 + rng() % 80;
            float v = (float)((int)(rng() % 2000) - 1000) / 256.0f;
            ids.push_back(id);
            vals.push_back(v);
            char f[64];
            std::snprintf(f, sizeof f, " %u:%.9g", id, (double)v);
            lines += f;
        }
        lines += "\n";
        ptr.push_back((uint32_t)ids.size());
    }
    std::ofstream(text) << lines;

    wisp::Engine eng(2);
    wisp::Model m(eng, model);
    CHECK(m.num_features() == 1000 && m.bias() == -0.25 && m.meta("source") == "cpp-spec" && m.meta("x").empty());
    CHECK(m.dtype() == "f32" && m.columns().empty() && m.weight(3) == w[3]);
    wisp::Session s(eng, m, "cpu");
    auto b = wisp::Batch::wrap(eng, ptr, ids, vals);
    std::vector<float> p = s.score(b);
    CHECK(p.size() == 500);

    // parity with the CLI, line by line
    std::string cmd = std::string(cli) + " score -m " + model + " " + text + " 2>/dev/null";
    FILE *f = popen(cmd.c_str(), "r");
    std::vector<std::string> want;
    char line[128];
    while (f && std::fgets(line, sizeof line, f)) { line[std::strcspn(line, "\n")] = 0; want.push_back(line); }
    CHECK(f && pclose(f) == 0);
    CHECK(want.size() == p.size());
    int same = 0;
    for (size_t i = 0; i < p.size() && i < want.size(); i++) same += cli_format(p[i]) == want[i];
    CHECK(same == (int)p.size());

    // the builder and the libsvm parser give the same bits as the wrapped batch
    wisp::Batch built(eng);
    for (size_t r = 0; r + 1 < ptr.size(); r++) {
        std::vector<uint64_t> rid(ids.begin() + ptr[r], ids.begin() + ptr[r + 1]);
        built.add_row(rid, std::span<const float>(vals.data() + ptr[r], ptr[r + 1] - ptr[r]));
    }
    wisp::Batch parsed(eng);
    parsed.parse_libsvm(lines);
    CHECK(s.score(parsed) == s.score(built));
    for (size_t i = 0; i < p.size(); i++) if (cli_format(s.score(built)[i]) != want[i]) { CHECK(false); break; }

    // submit / wait
    std::vector<float> a1(500), a2(500);
    s.submit(b, a1);
    s.submit(b, a2);
    CHECK(s.wait() && s.wait() && !s.wait());
    CHECK(a1 == p && a2 == p);
    CHECK(s.stat(WISP_STAT_ROWS) > 0 && s.last_device() == "cpu");

    // bad rows are data: NaN and listed, never thrown
    std::vector<uint32_t> bp{0, 1, 2}, bi{1, 2};
    std::vector<float> bv{1.0f, NAN};
    auto bad = wisp::Batch::wrap(eng, bp, bi, bv);
    std::vector<float> q = s.score(bad);
    CHECK(!std::isnan(q[0]) && std::isnan(q[1]) && bad.bad_rows().size() == 1 && bad.bad_rows()[0].row == 1);

    // every C failure as wisp::Error with its status and the engine's message
    CHECK(throws(WISP_EIO, [&] { wisp::Model x(eng, std::string(dir) + "/missing.wisp"); }));
    { std::ofstream(std::string(dir) + "/junk.wisp") << std::string(256, '\0'); }
    CHECK(throws(WISP_EFORMAT, [&] { wisp::Model x(eng, std::string(dir) + "/junk.wisp"); }));
    {
        std::ifstream in(model, std::ios::binary);
        std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        bytes[bytes.size() - 5] ^= 0x55;
        std::ofstream(std::string(dir) + "/flip.wisp", std::ios::binary) << bytes;
    }
    CHECK(throws(WISP_ECHECKSUM, [&] { wisp::Model x(eng, std::string(dir) + "/flip.wisp"); }));
    CHECK(throws(WISP_EINVAL, [&] { wisp::Session x(eng, m, "tpu"); }));
    CHECK(throws(WISP_EINVAL, [&] { s.set_device("gpu:x"); }));
    CHECK(throws(WISP_EINVAL, [&] { wisp::Model::write(dir, w, 0); }));     // a directory
    std::vector<uint32_t> dec{0, 2, 1}, two{1, 2};
    CHECK(throws(WISP_EINVAL, [&] { wisp::Batch::wrap(eng, dec, two); }));
    std::vector<uint32_t> over{0, 3};
    CHECK(throws(WISP_EINVAL, [&] { wisp::Batch::wrap(eng, over, two); }));
    // wisp_batch_from_csr's rules: indptr from 0 and up to ids.size(); values one per id
    std::vector<uint32_t> from1{1, 2}, short1{0, 1};
    CHECK(throws(WISP_EINVAL, [&] { wisp::Batch::wrap(eng, from1, two); }));
    CHECK(throws(WISP_EINVAL, [&] { wisp::Batch::wrap(eng, short1, two); }));
    std::vector<float> one{1.0f};
    CHECK(throws(WISP_EINVAL, [&] { wisp::Batch::wrap(eng, std::vector<uint32_t>{0, 2}, two, one); }));
    {
        // in place: the batch reads the caller's arrays; a negative-looking id is just large here (uint32)
        std::vector<uint32_t> ip{0, 2}, id2{1, 0xFFFFFFFFu};
        auto w2 = wisp::Batch::wrap(eng, ip, id2);
        CHECK(wisp_batch_indptr(w2.get()) == ip.data() && wisp_batch_ids(w2.get()) == id2.data());
        CHECK(!std::isnan(s.score(w2)[0]) && w2.bad_rows().empty());
    }
    CHECK(throws(WISP_EINVAL, [&] { wisp::Batch::wrap(eng, std::span<const uint32_t>(), two); }));
    std::vector<float> small(3);
    CHECK(throws(WISP_EINVAL, [&] { s.score(b, small); }));
    std::vector<uint64_t> many(WISP_MAX_ROW_FEATURES + 1, 1);
    wisp::Batch lim(eng);
    CHECK(throws(WISP_ELIMIT, [&] { lim.add_row(many); }));
    CHECK(throws(WISP_EINVAL, [&] { lim.add_row(many, small); }));
    // moved-from handles are empty and refused
    wisp::Session s2 = std::move(s);
    CHECK(s.get() == nullptr && s2.get() != nullptr);
    CHECK(throws(WISP_EINVAL, [&] { s.score(b); }));
    CHECK(s2.score(b) == p);
    wisp::Model m2 = std::move(m);
    CHECK(throws(WISP_EINVAL, [&] { (void)m.num_features(); }));
    CHECK(throws(WISP_EINVAL, [&] { wisp::Session x(eng, m, "cpu"); }));
    try {
        wisp::Model x(eng, std::string(dir) + "/missing.wisp");
    } catch (const wisp::Error &e) {
        CHECK(std::strcmp(e.name(), "WISP_EIO") == 0 && std::strstr(e.what(), "missing.wisp"));
    }

    // raw rows of a model with feature columns: built value by value and parsed JSON lines agree with the CLI
    {
        std::string cols = "{\"format\":\"wisp-columns\",\"version\":1,\"inputs\":[{\"name\":\"a\",\"dtype\":\"string\"},"
                           "{\"name\":\"n\",\"dtype\":\"float32\",\"default\":0}],\"columns\":["
                           "{\"name\":\"a\",\"type\":\"hash_bucket\",\"key\":\"a\",\"buckets\":100,\"offset\":0},"
                           "{\"name\":\"n\",\"type\":\"numeric\",\"key\":\"n\",\"offset\":100}]}";
        std::string cm = std::string(dir) + "/cols.wisp", jl = std::string(dir) + "/rows.jsonl";
        wisp::Model::write(cm, std::span<const float>(w.data(), 101), 0.5, WISP_F32, "", cols);
        wisp::Model mc(eng, cm);
        wisp::Columns c(mc);
        CHECK(c.num_inputs() == 2 && c.input_name(c.input("n")) == "n");
        CHECK(throws(WISP_EINVAL, [&] { (void)c.input("zzz"); }));
        CHECK(throws(WISP_ESTATE, [&] { wisp::Columns x(m2); }));      // a model without columns
        const char *names[] = {"Paris", "Oslo", "Lima"};
        std::string jtext;
        wisp::Raw built_raw(eng, c);
        for (int i = 0; i < 30; i++) {
            char l[128];
            std::snprintf(l, sizeof l, "{\"a\": \"%s\", \"n\": %.9g}\n", names[i % 3], (double)(i * 0.25f));
            jtext += l;
            built_raw.row_begin(i + 1);
            built_raw.add(c.input("a"), std::string_view(names[i % 3]));
            built_raw.add(c.input("n"), (double)(i * 0.25f));
            built_raw.row_end();
        }
        std::ofstream(jl) << jtext;
        wisp::Raw parsed_raw(eng, c);
        parsed_raw.parse_jsonl(jtext);
        wisp::Session sc(eng, mc, "cpu");
        std::vector<float> pr = sc.score(built_raw);
        CHECK(pr == sc.score(parsed_raw) && pr.size() == 30);
        std::string rcmd = std::string(cli) + " score --format jsonl -m " + cm + " " + jl + " 2>/dev/null";
        FILE *rf = popen(rcmd.c_str(), "r");
        int rsame = 0, rn = 0;
        while (rf && std::fgets(line, sizeof line, rf)) {
            line[std::strcspn(line, "\n")] = 0;
            if (rn < 30 && cli_format(pr[rn]) == line) rsame++;
            rn++;
        }
        CHECK(rf && pclose(rf) == 0 && rn == 30 && rsame == 30);
        wisp::Raw bad_raw(eng, c);
        bad_raw.parse_jsonl("{\"zzz\": 1}\n");
        std::vector<float> pb = sc.score(bad_raw);
        CHECK(pb.size() == 1 && std::isnan(pb[0]) && bad_raw.bad_rows().size() == 1);
        std::vector<float> none;
        CHECK(throws(WISP_EINVAL, [&] { sc.score(bad_raw, none); }));
    }

    std::string rm = std::string("rm -rf ") + dir;
    if (std::system(rm.c_str()) != 0) std::printf("could not remove %s\n", dir);
    std::printf("cpp: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
