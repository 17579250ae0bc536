/* fuzz_liblinear.c — libFuzzer target: wisp_import_liblinear on hostile LIBLINEAR model files; every import that succeeds must load. */
/*
 * Input: one byte choosing the output dtype (byte % 3), then the LIBLINEAR
 * model text, written to a scratch file and imported into a .wisp file.
 * Properties: no crash; a failure is WISP_EPARSE / WISP_ELIMIT naming the
 * input file (or WISP_EINVAL for an fp16 overflow, naming the output); a
 * success gives a .wisp file that loads, has num_features = nr_feature + 1,
 * weight 0 == 0, source=liblinear, and the dtype asked for.
 */
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    fuzz_init_common();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    int dtype = data[0] % 3;
    const char *in = fuzz_path("model.liblinear"), *out = fuzz_path("imported.wisp");
    if (fuzz_write_file(in, data + 1, size - 1) != 0) { perror(in); abort(); }
    int st = wisp_import_liblinear(in, out, dtype);
    if (st != WISP_OK) {
        if (st == WISP_EINVAL)
            FUZZ_REQUIRE(dtype == WISP_F16 && strstr(wisp_errmsg(), "fp16 range") && strstr(wisp_errmsg(), out),
                         "EINVAL from import");
        else
            FUZZ_REQUIRE((st == WISP_EPARSE || st == WISP_ELIMIT) && strstr(wisp_errmsg(), in), "status %d (%s)",
                         st, wisp_err_name(st));
        return 0;
    }
    wisp_model *m = NULL;
    st = wisp_model_load(fuzz_eng, out, &m);
    FUZZ_REQUIRE(st == WISP_OK, "an imported model does not load");
    const char *nr = wisp_model_meta(m, "liblinear_nr_feature"), *src = wisp_model_meta(m, "source");
    FUZZ_REQUIRE(nr && src && strcmp(src, "liblinear") == 0, "meta");
    FUZZ_REQUIRE(wisp_model_num_features(m) == strtoull(nr, NULL, 10) + 1, "num_features %llu, nr_feature %s",
                 (unsigned long long)wisp_model_num_features(m), nr);
    FUZZ_REQUIRE(wisp_model_weight(m, 0) == 0.0f, "weight 0 is %g", (double)wisp_model_weight(m, 0));
    FUZZ_REQUIRE(wisp_model_dtype(m) == dtype, "dtype %d, asked %d", wisp_model_dtype(m), dtype);
    FUZZ_REQUIRE(isfinite(wisp_model_bias(m)), "bias");
    wisp_model_free(m);
    return 0;
}
