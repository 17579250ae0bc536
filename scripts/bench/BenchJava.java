// BenchJava.java — the Java side of scripts/bench/bench_java.sh: JNI per-call cost (10 rows), 200k rows from direct buffers, a pure-Java scorer peer.
//
//   java -cp build/wisp.jar:CLASSES BenchJava DIR DEVICE      (writes DIR/model.wisp and DIR/{ptr,ids,vals}.bin
//   for the C peer, prints one JSON object of figures; run it through bench_java.sh)
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Arrays;
import java.util.SplittableRandom;

import wisp.Batch;
import wisp.Model;
import wisp.Session;

public class BenchJava {
    static final int NF = 1 << 22, ROWS = 200_000, PER_ROW = 39, SMALL = 10;

    static void dump(Path p, ByteBuffer b) throws IOException {
        try (FileChannel c = FileChannel.open(p, StandardOpenOption.CREATE, StandardOpenOption.WRITE, StandardOpenOption.TRUNCATE_EXISTING)) {
            b.rewind();
            while (b.hasRemaining()) c.write(b);
        }
    }

    static double median(double[] v) {
        double[] c = v.clone();
        Arrays.sort(c);
        return c[c.length / 2];
    }

    /** What a Java team writes without wisp: gather, sum in double, sigmoid. */
    static void javaScore(float[] w, double bias, int rows, int[] ptr, int[] ids, float[] vals, float[] out) {
        for (int r = 0; r < rows; r++) {
            double acc = 0;
            for (int k = ptr[r]; k < ptr[r + 1]; k++) {
                int id = ids[k];
                if (id >= 0 && id < w.length) acc += (double) w[id] * vals[k];
            }
            double z = bias + acc;
            out[r] = (float) (z >= 0 ? 1.0 / (1.0 + Math.exp(-z)) : Math.exp(z) / (1.0 + Math.exp(z)));
        }
    }

    public static void main(String[] args) throws Exception {
        Path dir = Path.of(args[0]);
        SplittableRandom rnd = new SplittableRandom(42);
        float[] w = new float[NF];
        for (int i = 0; i < NF; i++) w[i] = (float) (rnd.nextDouble() * 2 - 1) * 0.1f;
        double bias = -1.5;
        Model.write(dir.resolve("model.wisp").toString(), w, bias, "f32", "source=bench_java\n", null);
        int nnz = ROWS * PER_ROW;
        int[] ptr = new int[ROWS + 1];
        int[] ids = new int[nnz];
        float[] vals = new float[nnz];
        for (int r = 0; r < ROWS; r++) {
            ptr[r + 1] = (r + 1) * PER_ROW;
            for (int k = r * PER_ROW; k < (r + 1) * PER_ROW; k++) {
                ids[k] = rnd.nextInt(NF);           // uniform ids: the worst case for caches
                vals[k] = (float) rnd.nextDouble();
            }
        }
        try (Model m = Model.load(dir.resolve("model.wisp").toString()); Session s = m.session(args.length > 1 ? args[1] : "cpu");
             Batch big = Batch.of(ptr, ids, vals)) {
            ByteBuffer pb = ByteBuffer.allocate(4 * (ROWS + 1)).order(ByteOrder.LITTLE_ENDIAN);
            pb.asIntBuffer().put(ptr);
            dump(dir.resolve("ptr.bin"), pb);
            ByteBuffer ib = ByteBuffer.allocate(4 * nnz).order(ByteOrder.LITTLE_ENDIAN);
            ib.asIntBuffer().put(ids);
            dump(dir.resolve("ids.bin"), ib);
            ByteBuffer vb = ByteBuffer.allocate(4 * nnz).order(ByteOrder.LITTLE_ENDIAN);
            vb.asFloatBuffer().put(vals);
            dump(dir.resolve("vals.bin"), vb);

            // 10 rows: arrays, and direct buffers
            int[] sp = Arrays.copyOf(ptr, SMALL + 1);
            int[] si = Arrays.copyOf(ids, SMALL * PER_ROW);
            float[] sv = Arrays.copyOf(vals, SMALL * PER_ROW);
            float[] so = new float[SMALL];
            Batch small = Batch.of(sp, si, sv);
            FloatBuffer sob = ByteBuffer.allocateDirect(4 * SMALL).order(ByteOrder.nativeOrder()).asFloatBuffer();
            int calls = 200_000, reps = 7;
            double[] tArr = new double[reps], tBuf = new double[reps], tPeer = new double[reps];
            for (int i = 0; i < 50_000; i++) { s.score(sp, si, sv, so); s.score(small, sob); javaScore(w, bias, SMALL, sp, si, sv, so); }
            for (int rep = 0; rep < reps; rep++) {
                long t0 = System.nanoTime();
                for (int i = 0; i < calls; i++) s.score(sp, si, sv, so);
                long t1 = System.nanoTime();
                for (int i = 0; i < calls; i++) s.score(small, sob);
                long t2 = System.nanoTime();
                for (int i = 0; i < calls; i++) javaScore(w, bias, SMALL, sp, si, sv, so);
                long t3 = System.nanoTime();
                tArr[rep] = (t1 - t0) / (double) calls;
                tBuf[rep] = (t2 - t1) / (double) calls;
                tPeer[rep] = (t3 - t2) / (double) calls;
            }
            // 200k rows
            float[] out = new float[ROWS];
            FloatBuffer outb = ByteBuffer.allocateDirect(4 * ROWS).order(ByteOrder.nativeOrder()).asFloatBuffer();
            int breps = 15;
            double[] bBuf = new double[breps], bArr = new double[breps], bPeer = new double[breps];
            for (int i = 0; i < 3; i++) { s.score(big, outb); s.score(ptr, ids, vals, out); javaScore(w, bias, ROWS, ptr, ids, vals, out); }
            for (int rep = 0; rep < breps; rep++) {
                long t0 = System.nanoTime();
                s.score(big, outb);
                long t1 = System.nanoTime();
                s.score(ptr, ids, vals, out);
                long t2 = System.nanoTime();
                javaScore(w, bias, ROWS, ptr, ids, vals, out);
                long t3 = System.nanoTime();
                bBuf[rep] = (t1 - t0) / 1e6;
                bArr[rep] = (t2 - t1) / 1e6;
                bPeer[rep] = (t3 - t2) / 1e6;
            }
            float[] check = new float[ROWS];
            s.score(big, outb);
            javaScore(w, bias, ROWS, ptr, ids, vals, check);
            double maxdiff = 0;
            for (int r = 0; r < ROWS; r++) maxdiff = Math.max(maxdiff, Math.abs(outb.get(r) - check[r]));
            System.out.printf(java.util.Locale.ROOT,
                    "{\"java_10rows_arrays_ns_per_call\": %.1f, \"java_10rows_direct_ns_per_call\": %.1f, "
                            + "\"java_peer_10rows_ns_per_call\": %.1f, \"java_200k_direct_ms\": %.3f, \"java_200k_arrays_ms\": %.3f, "
                            + "\"java_peer_200k_ms\": %.3f, \"java_peer_max_abs_diff\": %.3g, \"java_threads\": %d, \"calls\": %d, \"reps_10rows\": %d, \"reps_200k\": %d, \"java_last_device\": \"%s\"}%n",
                    median(tArr), median(tBuf), median(tPeer), median(bBuf), median(bArr), median(bPeer), maxdiff,
                    wisp.Wisp.threads(), calls, reps, breps, s.lastDevice());
        }
    }
}
