// WispTest.java — JUnit 5 specs of the Java binding: parity with `wisp score`, error paths, close, threads, a million calls.
package wisp;

import static org.junit.jupiter.api.Assertions.*;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

import org.junit.jupiter.api.*;
import org.junit.jupiter.api.io.TempDir;

class WispTest {
    static final String COLUMNS = "{\"format\":\"wisp-columns\",\"version\":1,\"inputs\":["
            + "{\"name\":\"a\",\"dtype\":\"string\"},{\"name\":\"n\",\"dtype\":\"float32\",\"default\":0},"
            + "{\"name\":\"k\",\"dtype\":\"int64\",\"default\":-1}],\"columns\":["
            + "{\"name\":\"a\",\"type\":\"hash_bucket\",\"key\":\"a\",\"buckets\":100,\"offset\":0},"
            + "{\"name\":\"n\",\"type\":\"numeric\",\"key\":\"n\",\"offset\":100},"
            + "{\"name\":\"k\",\"type\":\"hash_bucket\",\"key\":\"k\",\"buckets\":50,\"offset\":101}]}";

    @TempDir static Path dir;
    static Path csrModel, colModel;
    static float[] weights;
    static String cli = System.getProperty("wisp.cli", "build/wisp");

    @BeforeAll
    static void models() {
        Random rnd = new Random(7);
        weights = new float[1000];
        for (int i = 0; i < weights.length; i++) weights[i] = (float) rnd.nextGaussian();
        csrModel = dir.resolve("csr.wisp");
        Model.write(csrModel.toString(), weights, -0.25, "f32", "source=java-spec\n", null);
        float[] w2 = Arrays.copyOf(weights, 151);
        colModel = dir.resolve("cols.wisp");
        Model.write(colModel.toString(), w2, 0.125, "f32", null, COLUMNS);
    }

    /** rows of random CSR: {indptr, indices} and values */
    static Object[] randomRows(int rows, int maxPer, int maxId, long seed) {
        Random rnd = new Random(seed);
        int[] ptr = new int[rows + 1];
        List<Integer> ids = new ArrayList<>();
        List<Float> vals = new ArrayList<>();
        for (int r = 0; r < rows; r++) {
            // sorted unique ids per row, as libsvm text has them (so `wisp score` reads the same rows)
            int n = rnd.nextInt(maxPer + 1);
            TreeSet<Integer> row = new TreeSet<>();
            while (row.size() < Math.min(n, maxId)) row.add(rnd.nextInt(maxId));
            for (int id : row) {
                ids.add(id);
                vals.add((rnd.nextInt(2000) - 1000) / 256f);   // exact in short decimal text
            }
            ptr[r + 1] = ids.size();
        }
        int[] idx = ids.stream().mapToInt(Integer::intValue).toArray();
        float[] v = new float[vals.size()];
        for (int i = 0; i < v.length; i++) v[i] = vals.get(i);
        return new Object[] { ptr, idx, v };
    }

    static float[] cliScore(Path model, Path input, String... extra) throws Exception {
        List<String> cmd = new ArrayList<>(List.of(cli, "score", "-m", model.toString()));
        cmd.addAll(List.of(extra));
        cmd.add(input.toString());
        Process p = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.DISCARD).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertEquals(0, p.waitFor(), "wisp score exit status: " + cmd);
        String[] lines = out.trim().isEmpty() ? new String[0] : out.trim().split("\n");
        float[] f = new float[lines.length];
        for (int i = 0; i < lines.length; i++) f[i] = Float.parseFloat(lines[i]);
        return f;
    }

    /** What `wisp score` prints for v: 9 decimals from 0.001 to 1 (fmt_prob in engine/cli/cli.c), else %.9g (exact). */
    static String cliFormat(float v) {
        if (Float.isNaN(v)) return "nan";
        if (v >= 0.001f && v <= 1.0f) {
            long x = Math.round((double) v * 1e9);
            if (x >= 1_000_000_000L) return "1.000000000";
            return String.format(Locale.ROOT, "0.%09d", x);
        }
        return null;
    }

    static void assertSameAsCli(float[] cli, float[] got) {
        assertEquals(cli.length, got.length, "rows");
        for (int i = 0; i < got.length; i++) {
            String f = cliFormat(got[i]);
            if (f != null) assertEquals(cliFormat(cli[i]), f, "row " + i);
            else assertEquals(Float.floatToIntBits(cli[i]), Float.floatToIntBits(got[i]), "row " + i + ": " + cli[i] + " vs " + got[i]);
        }
    }

    @Test
    void modelAccessors() {
        try (Model m = Model.load(csrModel.toString())) {
            assertEquals(1000, m.numFeatures());
            assertEquals(-0.25, m.bias());
            assertEquals("java-spec", m.meta("source"));
            assertNull(m.meta("nope"));
            assertTrue(m.meta().contains("source=java-spec"));
            assertNull(m.columns());
            assertEquals("f32", m.dtype());
            assertEquals(weights[17], m.weight(17));
            assertEquals(0f, m.weight(5000));
        }
        try (Model m = Model.load(colModel.toString())) {
            assertTrue(m.columns().contains("hash_bucket"));
        }
        assertEquals("0.1.0", Wisp.version());
        assertTrue(Wisp.threads() >= 1);
        assertNotNull(Wisp.gpuStatus());
    }

    @Test
    void parityWithCliValuedAndBinary() throws Exception {
        Object[] rr = randomRows(300, 12, 1200, 11);   // ids beyond 1000 are out of range: ignored
        int[] ptr = (int[]) rr[0], idx = (int[]) rr[1];
        float[] vals = (float[]) rr[2];
        StringBuilder valued = new StringBuilder(), binary = new StringBuilder();
        for (int r = 0; r < ptr.length - 1; r++) {
            valued.append("0");
            binary.append("0");
            for (int k = ptr[r]; k < ptr[r + 1]; k++) {
                valued.append(' ').append(idx[k]).append(':').append(String.format(Locale.ROOT, "%.9g", vals[k]));
                binary.append(' ').append(idx[k]);
            }
            valued.append('\n');
            binary.append('\n');
        }
        Path fv = dir.resolve("valued.libsvm"), fb = dir.resolve("binary.libsvm");
        Files.writeString(fv, valued);
        Files.writeString(fb, binary);
        float[] wantV = cliScore(csrModel, fv), wantB = cliScore(csrModel, fb);
        try (Model m = Model.load(csrModel.toString()); Session s = m.session("cpu")) {
            assertSameAsCli(wantV, s.score(ptr, idx, vals));
            assertSameAsCli(wantB, s.score(ptr, idx, null));
            wantV = s.score(ptr, idx, vals);   // the binding's own paths below agree bit for bit
            try (Batch b = Batch.of(ptr, idx, vals)) {
                assertArrayEquals(wantV, s.score(b));
                FloatBuffer out = ByteBuffer.allocateDirect(4 * (ptr.length - 1)).order(ByteOrder.nativeOrder()).asFloatBuffer();
                s.score(b, out);
                for (int i = 0; i < wantV.length; i++) assertEquals(wantV[i], out.get(i));
            }
            assertArrayEquals(wantV, s.submit(ptr, idx, vals).get());
            assertEquals(6 * 300L, s.stats().get("rows"));   // six calls of 300 rows above
            assertEquals("cpu", s.lastDevice());
        }
    }

    @Test
    void wrapDirectBuffersInPlace() {
        int[] ptr = { 0, 2, 3 };
        int[] idx = { 1, 3, 7 };
        float[] v = { 2f, 1f, 0.5f };
        IntBuffer p = ByteBuffer.allocateDirect(12).order(ByteOrder.nativeOrder()).asIntBuffer().put(ptr);
        IntBuffer i = ByteBuffer.allocateDirect(12).order(ByteOrder.nativeOrder()).asIntBuffer().put(idx);
        FloatBuffer f = ByteBuffer.allocateDirect(12).order(ByteOrder.nativeOrder()).asFloatBuffer().put(v);
        p.flip(); i.flip(); f.flip();
        try (Model m = Model.load(csrModel.toString()); Session s = m.session("cpu"); Batch b = Batch.wrap(p, i, f)) {
            float[] want = s.score(ptr, idx, v);
            assertArrayEquals(want, s.score(b));
            // in place: a change to the buffer is seen by the next call
            f.put(0, 0f);
            v[0] = 0f;
            assertArrayEquals(s.score(ptr, idx, v), s.score(b));
        }
    }

    @Test
    void allocatedBatch() throws Exception {
        try (Model m = Model.load(csrModel.toString()); Session s = m.session("auto"); Batch b = Batch.allocate(2, 3)) {
            b.indptr().put(0, 0).put(1, 2).put(2, 3);
            b.indices().put(0, 1).put(1, 3).put(2, 7);
            b.values().put(0, 2f).put(1, 1f).put(2, 0.5f);
            float[] want = s.score(new int[] { 0, 2, 3 }, new int[] { 1, 3, 7 }, new float[] { 2f, 1f, 0.5f });
            assertArrayEquals(want, s.score(b));
            assertArrayEquals(want, s.submit(b).get());
            Batch bin = Batch.allocate(1, 2, false);
            assertNull(bin.values());
        }
    }

    @Test
    void allocatedBatchPinnedParityWithCliAndClose() throws Exception {
        Object[] rr = randomRows(200, 10, 1000, 23);
        int[] ptr = (int[]) rr[0], idx = (int[]) rr[1];
        float[] vals = (float[]) rr[2];
        StringBuilder text = new StringBuilder();
        for (int r = 0; r < ptr.length - 1; r++) {
            text.append("0");
            for (int k = ptr[r]; k < ptr[r + 1]; k++)
                text.append(' ').append(idx[k]).append(':').append(String.format(Locale.ROOT, "%.9g", vals[k]));
            text.append('\n');
        }
        Path f = dir.resolve("allocated.libsvm");
        Files.writeString(f, text);
        float[] want = cliScore(csrModel, f);
        boolean gpu = Wisp.gpus().stream().anyMatch(g -> g.usable);
        try (Model m = Model.load(csrModel.toString()); Session s = m.session("auto")) {
            Batch b = Batch.allocate(ptr.length - 1, idx.length);
            // wisp_engine_host_alloc's memory: page-locked exactly when the engine has a usable GPU
            assertEquals(gpu, b.pinned(), Wisp.gpuStatus());
            b.indptr().put(ptr);
            b.indices().put(idx);
            b.values().put(vals);
            b.indptr().rewind();
            b.indices().rewind();
            b.values().rewind();
            assertSameAsCli(want, s.score(b));
            assertSameAsCli(want, s.submit(b).get());
            // close while a submitted score is pending: the memory stays until it is done
            CompletableFuture<float[]> pending = s.submit(b);
            b.close();
            assertSameAsCli(want, pending.get());
            b.close();   // closing twice is harmless
            assertEquals(WispException.ESTATE, assertThrows(WispException.class, () -> s.score(b)).status());
            assertEquals(WispException.ESTATE, assertThrows(WispException.class, b::indptr).status());
            assertEquals(WispException.ESTATE, assertThrows(WispException.class, b::values).status());
            // a wrapped batch is never pinned (wisp did not allocate it)
            try (Batch w = Batch.wrap(ByteBuffer.allocateDirect(8).order(ByteOrder.nativeOrder()).asIntBuffer(),
                    ByteBuffer.allocateDirect(4).order(ByteOrder.nativeOrder()).asIntBuffer(), null)) {
                assertFalse(w.pinned());
            }
        }
        // allocate and close in a loop: each block goes back to the engine at close
        for (int k = 0; k < 20000; k++) {
            try (Batch b = Batch.allocate(64, 640)) {
                b.indices().put(639, k);
                assertEquals(k, b.indices().get(639));
            }
        }
    }

    @Test
    void rawRowsParityWithCliJsonl() throws Exception {
        List<Map<String, Object>> rows = new ArrayList<>();
        StringBuilder jsonl = new StringBuilder();
        String[] cities = { "Paris", "Oslo", "Lima", "" };
        for (int r = 0; r < 40; r++) {
            Map<String, Object> row = new LinkedHashMap<>();
            String a = cities[r % 4];
            row.put("a", a);
            row.put("n", (double) (r * 0.37f));
            row.put("k", (long) (r % 7));
            rows.add(row);
            jsonl.append("{\"a\":\"").append(a).append("\",\"n\":").append(r * 0.37f).append(",\"k\":").append(r % 7).append("}\n");
        }
        Path f = dir.resolve("rows.jsonl");
        Files.writeString(f, jsonl);
        float[] want = cliScore(colModel, f, "--format", "jsonl");
        try (Model m = Model.load(colModel.toString()); Session s = m.session("cpu")) {
            assertSameAsCli(want, s.scoreRows(rows));
            want = s.scoreRows(rows);
            assertArrayEquals(want, s.scoreRaw(rows));          // scoreRows is scoreRaw's alias
            Map<String, Object> cols = new LinkedHashMap<>();
            String[] a = new String[40];
            float[] n = new float[40];
            long[] k = new long[40];
            for (int r = 0; r < 40; r++) { a[r] = cities[r % 4]; n[r] = r * 0.37f; k[r] = r % 7; }
            cols.put("a", a); cols.put("n", n); cols.put("k", k);
            assertArrayEquals(want, s.scoreColumns(cols));
            assertTrue(s.lastBadRows().isEmpty());
        }
    }

    @Test
    void csrArraysGoThroughTheOneCheckedEntry() {
        try (Model m = Model.load(csrModel.toString()); Session s = m.session("cpu")) {
            // scipy's rules (wisp_batch_from_csr, WISP_CSR_STRICT): refused with the engine's words
            WispException e = assertThrows(WispException.class, () -> s.score(new int[] { 1, 2, 3 }, new int[3], null));
            assertEquals(WispException.EINVAL, e.status());
            assertTrue(e.getMessage().contains("indptr[0] = 1, must be 0"), e.getMessage());
            e = assertThrows(WispException.class, () -> s.score(new int[] { 0, 1, 2 }, new int[3], null));
            assertTrue(e.getMessage().contains("indptr[-1] = 2 but indices has 3 entries"), e.getMessage());
            e = assertThrows(WispException.class, () -> s.score(new int[] { 0, 2, 1, 3 }, new int[3], null));
            assertTrue(e.getMessage().contains("indptr decreases at row 1 (indptr[2] = 1 < indptr[1] = 2)"), e.getMessage());
            e = assertThrows(WispException.class, () -> s.score(new int[] { 0, 2 }, new int[2], new float[3]));
            assertTrue(e.getMessage().contains("values has 3 entries but indices has 2"), e.getMessage());
            // bad rows in the engine's words, under badRows() and its alias lastBadRows()
            float[] p = s.score(new int[] { 0, 1, 2, 4 }, new int[] { 1, -5, 2, 3 }, new float[] { 1f, 1f, 1f, Float.NaN });
            assertFalse(Float.isNaN(p[0]));
            assertTrue(Float.isNaN(p[1]) && Float.isNaN(p[2]));
            List<BadRow> bad = s.badRows();
            assertEquals(2, bad.size(), bad.toString());
            assertEquals(1, bad.get(0).row);
            assertEquals("feature #1: a negative feature index (-5)", bad.get(0).message);
            assertEquals(2, bad.get(1).row);
            assertEquals("feature #2 (id 3): value nan is not a finite float32", bad.get(1).message);
            @SuppressWarnings("deprecation")
            List<BadRow> alias = s.lastBadRows();
            assertEquals(bad, alias);
            // a row wider than WISP_MAX_ROW_FEATURES is a bad row, the others score
            int n = (1 << 20) + 1;
            p = s.score(new int[] { 0, n, n + 1 }, new int[n + 1], null);
            assertTrue(Float.isNaN(p[0]) && !Float.isNaN(p[1]));
            assertTrue(s.badRows().get(0).message.contains("1048577 features, more than WISP_MAX_ROW_FEATURES"));
            // direct buffers: read from position to limit, so a larger buffer is given its limit
            int[] ptr = { 0, 2, 3 };
            int[] idx = { 1, 3, 7 };
            IntBuffer pb = ByteBuffer.allocateDirect(12).order(ByteOrder.nativeOrder()).asIntBuffer().put(ptr);
            IntBuffer ib = ByteBuffer.allocateDirect(40).order(ByteOrder.nativeOrder()).asIntBuffer().put(idx);
            pb.flip();
            IntBuffer whole = ib.duplicate().clear();
            try (Batch wide = Batch.wrap(pb, whole, null)) {
                e = assertThrows(WispException.class, () -> s.score(wide));
                assertTrue(e.getMessage().contains("indptr[-1] = 3 but indices has 10 entries"), e.getMessage());
            }
            ib.flip();
            try (Batch exact = Batch.wrap(pb, ib, null)) {
                assertArrayEquals(s.score(ptr, idx, null), s.score(exact));
            }
        }
    }

    @Test
    void rawBadRows() {
        try (Model m = Model.load(colModel.toString()); Session s = m.session("cpu")) {
            List<Map<String, Object>> rows = List.of(Map.of("a", "x", "n", 1.0), Map.of("zzz", 1), Map.of("n", "a string"),
                    Map.of("n", Double.NaN), Map.of("a", new Object()));
            float[] p = s.scoreRows(rows);
            assertFalse(Float.isNaN(p[0]));
            for (int i = 1; i < 5; i++) assertTrue(Float.isNaN(p[i]), "row " + i);
            List<BadRow> bad = s.lastBadRows();
            assertEquals(4, bad.size(), bad.toString());
            assertTrue(bad.get(0).message.contains("zzz"), bad.toString());
            WispException e = assertThrows(WispException.class, () -> s.scoreColumns(Map.of("a", new String[2], "n", new float[3])));
            assertEquals(WispException.EINVAL, e.status());
        }
        try (Model m = Model.load(csrModel.toString()); Session s = m.session("cpu")) {
            WispException e = assertThrows(WispException.class, () -> s.scoreRows(List.of(Map.of("a", "x"))));
            assertEquals(WispException.ESTATE, e.status());
        }
    }

    @Test
    void errorPaths() throws IOException {
        WispException e = assertThrows(WispException.class, () -> Model.load(dir.resolve("missing.wisp").toString()));
        assertEquals(WispException.EIO, e.status());
        assertEquals("WISP_EIO", e.statusName());
        assertTrue(e.getMessage().contains("missing.wisp"), e.getMessage());
        Path junk = dir.resolve("junk.wisp");
        Files.write(junk, new byte[256]);
        e = assertThrows(WispException.class, () -> Model.load(junk.toString()));
        assertEquals(WispException.EFORMAT, e.status());
        byte[] good = Files.readAllBytes(csrModel);
        good[good.length - 5] ^= 0x55;
        Path flipped = dir.resolve("flipped.wisp");
        Files.write(flipped, good);
        e = assertThrows(WispException.class, () -> Model.load(flipped.toString()));
        assertEquals(WispException.ECHECKSUM, e.status(), e.getMessage());
        e = assertThrows(WispException.class, () -> Model.write(dir.resolve("x.wisp").toString(), new float[1], 0, "f64", null, null));
        assertEquals(WispException.EINVAL, e.status());
        e = assertThrows(WispException.class, () -> Model.write(dir.toString(), new float[1], 0, "f32", null, null));
        assertEquals(WispException.EINVAL, e.status(), e.getMessage());
        assertThrows(NullPointerException.class, () -> Model.load(null));
        try (Model m = Model.load(csrModel.toString())) {
            e = assertThrows(WispException.class, () -> m.session("tpu"));
            assertEquals(WispException.EINVAL, e.status(), e.getMessage());
            try (Session s = m.session("cpu")) {
                // indptr empty, decreasing, not starting at 0, beyond indices, beyond values
                assertEquals(WispException.EINVAL, assertThrows(WispException.class, () -> s.score(new int[0], new int[0], null)).status());
                assertEquals(WispException.EINVAL, assertThrows(WispException.class, () -> s.score(new int[] { 0, 2, 1 }, new int[2], null)).status());
                assertEquals(WispException.EINVAL, assertThrows(WispException.class, () -> s.score(new int[] { 1, 2 }, new int[2], null)).status());
                assertEquals(WispException.EINVAL, assertThrows(WispException.class, () -> s.score(new int[] { 0, 3 }, new int[2], null)).status());
                assertEquals(WispException.EINVAL, assertThrows(WispException.class, () -> s.score(new int[] { 0, 2 }, new int[2], new float[1])).status());
                assertEquals(WispException.EINVAL, assertThrows(WispException.class, () -> s.score(new int[] { 0, 2 }, new int[2], null, new float[0])).status());
                assertEquals(WispException.EINVAL, assertThrows(WispException.class, () -> s.setDevice("gpu:x")).status());
                assertThrows(NullPointerException.class, () -> s.score(null, new int[0], null));
                // a bad value and a negative id are bad rows, not exceptions
                float[] p = s.score(new int[] { 0, 1, 2, 3 }, new int[] { 1, -5, 2 }, new float[] { 1f, 1f, Float.NaN });
                assertFalse(Float.isNaN(p[0]));
                assertTrue(Float.isNaN(p[1]));
                assertTrue(Float.isNaN(p[2]));
                assertEquals(2, s.lastBadRows().size(), s.lastBadRows().toString());
                assertTrue(s.lastBadRows().get(1).message.contains("negative") || s.lastBadRows().get(0).message.contains("negative"));
            }
        }
        // heap and big-endian buffers are refused
        IntBuffer heap = IntBuffer.wrap(new int[] { 0 });
        assertEquals(WispException.EINVAL, assertThrows(WispException.class, () -> Batch.wrap(heap, heap, null)).status());
        IntBuffer big = ByteBuffer.allocateDirect(8).asIntBuffer();
        assertEquals(WispException.EINVAL, assertThrows(WispException.class, () -> Batch.wrap(big, big, null)).status());
        assertEquals(WispException.EINVAL, assertThrows(WispException.class, () -> Batch.allocate(-1, 0)).status());
    }

    @Test
    void closeTwiceAndUseAfterClose() throws Exception {
        Model m = Model.load(csrModel.toString());
        Session s = m.session("cpu");
        Batch b = Batch.of(new int[] { 0, 1 }, new int[] { 3 }, null);
        m.close();
        m.close();
        assertEquals(WispException.ESTATE, assertThrows(WispException.class, m::numFeatures).status());
        assertEquals(WispException.ESTATE, assertThrows(WispException.class, () -> m.session("cpu")).status());
        // the session keeps the engine's model: it still scores
        assertEquals(1, s.score(b).length);
        b.close();
        b.close();
        assertEquals(WispException.ESTATE, assertThrows(WispException.class, () -> s.score(b)).status());
        s.close();
        s.close();
        WispException e = assertThrows(WispException.class, () -> s.score(new int[] { 0 }, new int[0], null));
        assertEquals(WispException.ESTATE, e.status());
        assertTrue(e.getMessage().contains("closed"));
        assertEquals(WispException.ESTATE, assertThrows(WispException.class, () -> s.submit(new int[] { 0 }, new int[0], null)).status());
        assertEquals(WispException.ESTATE, assertThrows(WispException.class, s::stats).status());
    }

    @Test
    void closeFinishesSubmitted() throws Exception {
        Object[] rr = randomRows(2000, 20, 1000, 3);
        try (Model m = Model.load(csrModel.toString())) {
            Session s = m.session("cpu");
            float[] want = s.score((int[]) rr[0], (int[]) rr[1], (float[]) rr[2]);
            List<CompletableFuture<float[]>> fs = new ArrayList<>();
            for (int i = 0; i < 20; i++) fs.add(s.submit((int[]) rr[0], (int[]) rr[1], (float[]) rr[2]));
            s.close();
            for (CompletableFuture<float[]> f : fs) assertArrayEquals(want, f.get(10, TimeUnit.SECONDS));
        }
    }

    @Test
    void sessionUsedFromTwoThreadsIsRefused() throws Exception {
        Object[] rr = randomRows(200000, 20, 1000, 5);
        int[] ptr = (int[]) rr[0], idx = (int[]) rr[1];
        float[] v = (float[]) rr[2];
        try (Model m = Model.load(csrModel.toString()); Session s = m.session("cpu")) {
            float[] want = s.score(ptr, idx, v);
            AtomicBoolean refused = new AtomicBoolean(), stop = new AtomicBoolean();
            AtomicInteger wrong = new AtomicInteger();
            Thread t = new Thread(() -> {
                while (!stop.get()) {
                    try {
                        if (!Arrays.equals(want, s.score(ptr, idx, v))) wrong.incrementAndGet();
                    } catch (WispException e) {
                        if (e.status() == WispException.ESTATE) refused.set(true);
                    }
                }
            });
            t.start();
            long end = System.nanoTime() + 10_000_000_000L;
            while (!refused.get() && System.nanoTime() < end) {
                try {
                    if (!Arrays.equals(want, s.score(ptr, idx, v))) wrong.incrementAndGet();
                } catch (WispException e) {
                    assertEquals(WispException.ESTATE, e.status());
                    assertTrue(e.getMessage().contains("another thread"), e.getMessage());
                    refused.set(true);
                }
            }
            stop.set(true);
            t.join();
            assertTrue(refused.get(), "two threads at once were never refused");
            assertEquals(0, wrong.get());
        }
    }

    @Test
    void concurrentSessionsShareAModel() throws Exception {
        Object[] rr = randomRows(5000, 20, 1000, 9);
        int[] ptr = (int[]) rr[0], idx = (int[]) rr[1];
        float[] v = (float[]) rr[2];
        try (Model m = Model.load(csrModel.toString())) {
            float[] want;
            try (Session s = m.session("auto")) { want = s.score(ptr, idx, v); }   // the device the threads use
            ExecutorService pool = Executors.newFixedThreadPool(4);
            List<Future<Boolean>> fs = new ArrayList<>();
            for (int t = 0; t < 4; t++)
                fs.add(pool.submit(() -> {
                    try (Session s = m.session("auto")) {
                        for (int i = 0; i < 50; i++) if (!Arrays.equals(want, s.score(ptr, idx, v))) return false;
                    }
                    return true;
                }));
            for (Future<Boolean> f : fs) assertTrue(f.get());
            pool.shutdown();
        }
    }

    static long rssKb() throws IOException {
        for (String l : Files.readAllLines(Path.of("/proc/self/status")))
            if (l.startsWith("VmRSS:")) return Long.parseLong(l.replaceAll("[^0-9]", ""));
        return -1;
    }

    @Test
    void millionCallsFlatMemory() throws Exception {
        int[] ptr = { 0, 3 };
        int[] idx = { 1, 3, 7 };
        float[] v = { 2f, 1f, 0.5f };
        float[] out = new float[1];
        try (Model m = Model.load(csrModel.toString()); Session s = m.session("cpu")) {
            for (int i = 0; i < 100_000; i++) s.score(ptr, idx, v, out);   // warm up: JIT, malloc arenas
            System.gc();
            long before = rssKb();
            for (int i = 0; i < 1_000_000; i++) s.score(ptr, idx, v, out);
            System.gc();
            long after = rssKb();
            assertTrue(after - before < 16 * 1024, "RSS grew " + (after - before) + " kB over a million calls");
            assertEquals(1_100_000, s.stats().get("batches"));
        }
    }

    @Test
    void cleanerFreesWhatWasNotClosed() throws Exception {
        int[] ptr = { 0, 2 };
        int[] idx = { 1, 3 };
        for (int i = 0; i < 2_000; i++) Model.load(csrModel.toString()).session("cpu").score(ptr, idx, null);
        System.gc();
        Thread.sleep(200);
        long before = rssKb();
        for (int round = 0; round < 10; round++) {
            for (int i = 0; i < 2_000; i++) {
                Session s = Model.load(csrModel.toString()).session("cpu");   // never closed: the Cleaner's job
                s.score(ptr, idx, null);
                if (i % 500 == 0) s.submit(ptr, idx, null).get();            // with a worker thread too
            }
            System.gc();
            Thread.sleep(50);
        }
        System.gc();
        Thread.sleep(200);
        long after = rssKb();
        assertTrue(after - before < 32 * 1024, "RSS grew " + (after - before) + " kB over 20,000 unclosed models and sessions");
    }
}
