/* wisp.hpp — header-only C++20 RAII over wisp.h: wisp::Engine, Model, Batch, Columns, Raw, Session, and wisp::Error.
 *
 *     wisp::Engine eng;                                   // one thread per core
 *     wisp::Model m(eng, "ctr.wisp");                      // throws wisp::Error (EIO, EFORMAT, ...)
 *     wisp::Session s(eng, m, "auto");
 *     std::vector<uint32_t> ptr{0, 3}, ids{1, 3, 7};  std::vector<float> vals{2, 1, .5f};
 *     auto b = wisp::Batch::wrap(eng, ptr, ids, vals);     // std::span views: no copy
 *     std::vector<float> p = s.score(b);
 *
 * Errors: exceptions. Every failing status of wisp.h becomes a wisp::Error
 * carrying the status (WISP_E*, status()), its name (name(): "WISP_EIO")
 * and wisp_errmsg()'s text (what()). Why exceptions and not an
 * expected-style result: handles are made by constructors (RAII), which
 * cannot return a result; std::expected is C++23 and this header keeps to
 * C++20 (std::span); and failures here are rare and not control flow (bad
 * rows are data: they score NaN and are listed, never thrown). Sizes the C
 * API cannot check (an out span shorter than the rows, values and ids of
 * different lengths) are checked here and throw wisp::Error(WISP_EINVAL).
 *
 * Ownership and threads, as in C: handles are move-only; a moved-from handle
 * is empty (get() == nullptr) and using it throws WISP_EINVAL. Engine and
 * Model may be shared by any number of threads; a Batch, Raw or Session is
 * used by one thread at a time. Models, batches and sessions keep their
 * engine (and sessions their model) alive inside wisp, so destruction order
 * is free. A wrapped Batch reads the caller's memory in place: it must stay
 * valid and unchanged while the batch is used.
 */
#ifndef WISP_HPP
#define WISP_HPP

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "wisp.h"

namespace wisp {

/* A failed wisp call: the status code, its name and the engine's message. */
class Error : public std::runtime_error {
public:
    Error(int status, const std::string &msg) : std::runtime_error(msg), status_(status) {}
    int status() const noexcept { return status_; }
    const char *name() const noexcept { return wisp_err_name(status_); }

private:
    int status_;
};

namespace detail {
/* Throw the calling thread's error for a failing status; return on WISP_OK. */
inline void check(int status)
{
    if (status == WISP_OK) return;
    const char *m = wisp_errmsg();
    throw Error(status, m && m[0] ? m : wisp_strerror(status));
}
[[noreturn]] inline void fail(int status, const std::string &msg) { throw Error(status, msg); }

/* A move-only owner of a C handle freed by Free. */
template <class T, void (*Free)(T *)>
class handle {
public:
    handle() = default;
    explicit handle(T *p) noexcept : p_(p) {}
    handle(const handle &) = delete;
    handle &operator=(const handle &) = delete;
    handle(handle &&o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
    handle &operator=(handle &&o) noexcept
    {
        if (this != &o) { Free(p_); p_ = std::exchange(o.p_, nullptr); }
        return *this;
    }
    ~handle() { Free(p_); }
    T *get() const noexcept { return p_; }
    T *live(const char *what) const
    {
        if (!p_) fail(WISP_EINVAL, std::string(what) + " is empty (moved from)");
        return p_;
    }
    explicit operator bool() const noexcept { return p_ != nullptr; }

private:
    T *p_ = nullptr;
};
}  // namespace detail

/* The engine: CPU threads and devices (wisp_engine_new). */
class Engine {
public:
    explicit Engine(int threads = 0)
    {
        wisp_engine *e = nullptr;
        detail::check(wisp_engine_new(threads, &e));
        h_ = decltype(h_)(e);
    }
    wisp_engine *get() const noexcept { return h_.get(); }
    int threads() const { return wisp_engine_threads(h_.live("wisp::Engine")); }
    int gpu_count() const { return wisp_engine_gpu_count(h_.live("wisp::Engine")); }
    std::string gpu_status() const { return wisp_engine_gpu_status(h_.live("wisp::Engine")); }

private:
    detail::handle<wisp_engine, wisp_engine_free> h_;
};

/* A loaded, validated .wisp file (wisp_model_load). Thread-safe. */
class Model {
public:
    Model(const Engine &eng, const std::string &path)
    {
        wisp_model *m = nullptr;
        detail::check(wisp_model_load(live(eng), path.c_str(), &m));
        h_ = decltype(h_)(m);
    }
    /* wisp_model_write: weights stored as dtype; meta and columns may be empty. */
    static void write(const std::string &path, std::span<const float> weights, double bias, int dtype = WISP_F32,
                      const std::string &meta = "", const std::string &columns = "")
    {
        detail::check(wisp_model_write(path.c_str(), weights.data(), weights.size(), bias, dtype,
                                       meta.empty() ? nullptr : meta.c_str(), columns.empty() ? nullptr : columns.c_str()));
    }
    wisp_model *get() const noexcept { return h_.get(); }
    uint64_t num_features() const { return wisp_model_num_features(m()); }
    double bias() const { return wisp_model_bias(m()); }
    std::string dtype() const { return wisp_dtype_name(wisp_model_dtype(m())); }
    std::string path() const { return wisp_model_path(m()); }
    /* The meta value of key; empty when absent. */
    std::string meta(const std::string &key) const
    {
        const char *v = wisp_model_meta(m(), key.c_str());
        return v ? v : "";
    }
    std::string meta() const { return wisp_model_meta_text(m()); }
    std::string columns() const { return wisp_model_columns(m()); }
    float weight(uint64_t id) const { return wisp_model_weight(m(), id); }

private:
    static wisp_engine *live(const Engine &e)
    {
        if (!e.get()) detail::fail(WISP_EINVAL, "wisp::Engine is empty (moved from)");
        return e.get();
    }
    wisp_model *m() const { return h_.live("wisp::Model"); }
    detail::handle<wisp_model, wisp_model_free> h_;
};

/* One row the engine scored NaN, and why. */
struct BadRow {
    size_t row;
    uint64_t line;
    std::string message;
};

/* A batch of CSR rows: built (add_row, parse_libsvm) or wrapped over caller memory (wrap). */
class Batch {
public:
    explicit Batch(const Engine &eng)
    {
        wisp_batch *b = nullptr;
        detail::check(wisp_batch_new(live(eng), &b));
        h_ = decltype(h_)(b);
    }
    /* A batch over the caller's arrays, without copies, through the one checked entry for CSR
     * arrays (wisp_batch_from_csr) with scipy's rules (WISP_CSR_STRICT): indptr has rows + 1
     * entries from 0, never decreasing, up to ids.size(); vals is empty (binary rows) or one per
     * id. A broken indptr throws WISP_EINVAL; a bad row (a value that is not a finite float32,
     * a row of more than WISP_MAX_ROW_FEATURES ids) is data: NaN and listed (bad_rows()). */
    static Batch wrap(const Engine &eng, std::span<const uint32_t> indptr, std::span<const uint32_t> ids,
                      std::span<const float> vals = {})
    {
        if (indptr.empty()) detail::fail(WISP_EINVAL, "wisp::Batch::wrap: indptr is empty (it has rows + 1 entries)");
        if (!vals.empty() && vals.size() != ids.size())
            detail::fail(WISP_EINVAL, "wisp::Batch::wrap: vals has " + std::to_string(vals.size()) +
                                          " entries but ids has " + std::to_string(ids.size()));
        wisp_batch *b = nullptr;
        detail::check(wisp_batch_from_csr(live(eng), indptr.size() - 1, indptr.data(), WISP_CSR_UINT32, ids.data(),
                                          WISP_CSR_UINT32, ids.size(), vals.empty() ? nullptr : vals.data(),
                                          WISP_CSR_FLOAT32, WISP_CSR_STRICT, &b));
        return Batch(b);
    }
    wisp_batch *get() const noexcept { return h_.get(); }
    /* Append a row; vals empty: every feature binary, else one value per id. */
    void add_row(std::span<const uint64_t> ids, std::span<const float> vals = {})
    {
        if (!vals.empty() && vals.size() != ids.size())
            detail::fail(WISP_EINVAL, "wisp::Batch::add_row: " + std::to_string(vals.size()) + " values for " +
                                          std::to_string(ids.size()) + " ids");
        detail::check(wisp_batch_add_row(b(), ids.data(), vals.empty() ? nullptr : vals.data(), ids.size()));
    }
    /* Parse libsvm text (all of it: final), rows appended. */
    void parse_libsvm(std::string_view text)
    {
        detail::check(wisp_batch_parse_libsvm(b(), text.data(), text.size(), 1, 0, nullptr, nullptr));
    }
    void clear() { wisp_batch_clear(b()); }
    size_t rows() const { return wisp_batch_rows(b()); }
    size_t nnz() const { return wisp_batch_nnz(b()); }
    std::vector<BadRow> bad_rows() const
    {
        std::vector<BadRow> v;
        for (size_t i = 0, n = wisp_batch_bad_count(b()); i < n; i++) {
            size_t row; uint64_t line; const char *msg;
            if (wisp_batch_bad_row(b(), i, &row, &line, &msg) == WISP_OK) v.push_back({row, line, msg});
        }
        return v;
    }

private:
    explicit Batch(wisp_batch *b) : h_(b) {}
    static wisp_engine *live(const Engine &e)
    {
        if (!e.get()) detail::fail(WISP_EINVAL, "wisp::Engine is empty (moved from)");
        return e.get();
    }
    wisp_batch *b() const { return h_.live("wisp::Batch"); }
    detail::handle<wisp_batch, wisp_batch_free> h_;
};

/* A model's column description (wisp_columns_from_model); immutable, thread-safe. */
class Columns {
public:
    explicit Columns(const Model &m)
    {
        if (!m.get()) detail::fail(WISP_EINVAL, "wisp::Columns: the model is empty (moved from)");
        wisp_columns *c = nullptr;
        detail::check(wisp_columns_from_model(m.get(), &c));
        h_ = decltype(h_)(c);
    }
    wisp_columns *get() const noexcept { return h_.get(); }
    size_t num_inputs() const { return wisp_columns_num_inputs(c()); }
    std::string input_name(size_t i) const
    {
        const char *n = wisp_columns_input_name(c(), i);
        if (!n) detail::fail(WISP_EINVAL, "wisp::Columns::input_name: input " + std::to_string(i) + " out of range");
        return n;
    }
    /* The index of the input called name; throws WISP_EINVAL for an unknown name. */
    size_t input(std::string_view name) const
    {
        long i = wisp_columns_input_index(c(), name.data(), name.size());
        if (i < 0) detail::fail(WISP_EINVAL, "wisp::Columns::input: no input called '" + std::string(name) + "'");
        return (size_t)i;
    }

private:
    wisp_columns *c() const { return h_.live("wisp::Columns"); }
    detail::handle<wisp_columns, wisp_columns_free> h_;
};

/* Raw rows for a description (wisp_raw_*): built value by value or parsed from JSON lines. */
class Raw {
public:
    Raw(const Engine &eng, const Columns &c)
    {
        if (!eng.get() || !c.get()) detail::fail(WISP_EINVAL, "wisp::Raw: the engine or the columns are empty (moved from)");
        wisp_raw *r = nullptr;
        detail::check(wisp_raw_new(eng.get(), c.get(), &r));
        h_ = decltype(h_)(r);
    }
    wisp_raw *get() const noexcept { return h_.get(); }
    void row_begin(uint64_t line = 0) { detail::check(wisp_raw_row_begin(r(), line)); }
    void add(size_t input, double v) { detail::check(wisp_raw_add_float(r(), input, v)); }
    void add(size_t input, int64_t v) { detail::check(wisp_raw_add_int(r(), input, v)); }
    void add(size_t input, std::string_view v) { detail::check(wisp_raw_add_string(r(), input, v.data(), v.size())); }
    void row_end() { detail::check(wisp_raw_row_end(r())); }
    /* Parse JSON lines (all of the text: final). */
    void parse_jsonl(std::string_view text)
    {
        detail::check(wisp_raw_parse_jsonl(r(), text.data(), text.size(), 1, 0, nullptr, nullptr));
    }
    void clear() { wisp_raw_clear(r()); }
    size_t rows() const { return wisp_raw_rows(r()); }
    std::vector<BadRow> bad_rows() const
    {
        std::vector<BadRow> v;
        for (size_t i = 0, n = wisp_raw_bad_count(r()); i < n; i++) {
            size_t row; uint64_t line; const char *msg;
            if (wisp_raw_bad_row(r(), i, &row, &line, &msg) == WISP_OK) v.push_back({row, line, msg});
        }
        return v;
    }

private:
    wisp_raw *r() const { return h_.live("wisp::Raw"); }
    detail::handle<wisp_raw, wisp_raw_free> h_;
};

/* A session: placement on a device and scoring (wisp_session_*). One thread at a time. */
class Session {
public:
    Session(const Engine &eng, const Model &m, const std::string &device = "auto")
    {
        if (!eng.get() || !m.get()) detail::fail(WISP_EINVAL, "wisp::Session: the engine or the model is empty (moved from)");
        wisp_session *s = nullptr;
        detail::check(wisp_session_new(eng.get(), m.get(), device.c_str(), &s));
        h_ = decltype(h_)(s);
    }
    wisp_session *get() const noexcept { return h_.get(); }

    /* Score every row of b into out (at least b.rows() floats); NaN for bad rows. */
    void score(const Batch &b, std::span<float> out)
    {
        if (out.size() < b.rows())
            detail::fail(WISP_EINVAL, "wisp::Session::score: out has " + std::to_string(out.size()) + " floats for " +
                                          std::to_string(b.rows()) + " rows");
        detail::check(wisp_session_score(s(), b.get(), out.data()));
    }
    std::vector<float> score(const Batch &b)
    {
        std::vector<float> out(b.rows());
        score(b, out);
        return out;
    }
    /* Asynchronous: b and out belong to wisp until the matching wait() (see wisp.h). */
    void submit(const Batch &b, std::span<float> out)
    {
        if (out.size() < b.rows())
            detail::fail(WISP_EINVAL, "wisp::Session::submit: out has " + std::to_string(out.size()) + " floats for " +
                                          std::to_string(b.rows()) + " rows");
        detail::check(wisp_session_submit(s(), b.get(), out.data()));
    }
    /* Wait for the oldest submitted batch; false when nothing was submitted. */
    bool wait()
    {
        int st = wisp_session_wait(s(), nullptr);
        if (st == WISP_ESTATE) return false;
        detail::check(st);
        return true;
    }
    /* Raw rows straight to probabilities (wisp_session_score_raw); NaN for bad rows. */
    void score(const Raw &r, std::span<float> out)
    {
        if (out.size() < r.rows())
            detail::fail(WISP_EINVAL, "wisp::Session::score: out has " + std::to_string(out.size()) + " floats for " +
                                          std::to_string(r.rows()) + " raw rows");
        detail::check(wisp_session_score_raw(s(), r.get(), out.data()));
    }
    std::vector<float> score(const Raw &r)
    {
        std::vector<float> out(r.rows());
        score(r, out);
        return out;
    }
    void set_device(const std::string &device) { detail::check(wisp_session_set_device(s(), device.c_str())); }
    std::string device() const { return wisp_session_device(s()); }
    std::string last_device() const { return wisp_session_last_device(s()); }
    uint64_t stat(int which) const { return wisp_session_stat(s(), which); }
    void reset_stats() { wisp_session_reset_stats(s()); }

private:
    wisp_session *s() const { return h_.live("wisp::Session"); }
    detail::handle<wisp_session, wisp_session_free> h_;
};

}  // namespace wisp

#endif /* WISP_HPP */
