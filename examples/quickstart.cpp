// quickstart.cpp — the C++ API (wisp.hpp) in one page: write a model, load it, score two rows from caller memory.
//
//   c++ -std=c++20 quickstart.cpp $(pkg-config --cflags --libs wisp) -o quickstart && ./quickstart
#include <cstdio>
#include <vector>
#include <wisp.hpp>

int main()
{
    try {
        std::vector<float> weights{0.0f, 0.5f, -0.25f, 1.0f, 0.0f, 0.0f, 0.0f, 2.0f};
        wisp::Model::write("quickstart.wisp", weights, -0.5, WISP_F32, "source=quickstart\n");
        wisp::Engine eng;
        wisp::Model m(eng, "quickstart.wisp");
        wisp::Session s(eng, m, "auto");
        // two rows in CSR, read in place: a valued row (ids 1, 3, 7) and a binary one (ids 1, 3)
        std::vector<uint32_t> indptr{0, 3, 5}, ids{1, 3, 7, 1, 3};
        std::vector<float> vals{2.0f, 1.0f, 0.5f, 1.0f, 1.0f};
        auto b = wisp::Batch::wrap(eng, indptr, ids, vals);
        std::vector<float> p = s.score(b);
        std::printf("p = %.6f %.6f on %s\n", p[0], p[1], s.last_device().c_str());
        std::remove("quickstart.wisp");
        return 0;
    } catch (const wisp::Error &e) {
        std::fprintf(stderr, "quickstart: %s: %s\n", e.name(), e.what());
        std::remove("quickstart.wisp");
        return 1;
    }
}
