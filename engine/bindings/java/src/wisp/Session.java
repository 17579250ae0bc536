// Session.java — one caller's scoring state on a device: CSR arrays, Batch, raw batches, submit, statistics; one thread at a time.
package wisp;

import java.lang.ref.Cleaner;
import java.nio.FloatBuffer;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.LongFunction;

/**
 * A session (wisp_session): placement on a device and the scoring calls.
 * Threading as in C: a session is used by one thread at a time. A call made
 * while another thread is inside one on the same session is refused with
 * WispException(ESTATE), never run concurrently; so is a call made while
 * batches given to {@link #submit} are still pending. No call holds a Java
 * monitor while the engine works, and Java arrays are accessed only for the
 * length of one call.
 */
public final class Session implements AutoCloseable {
    private static final class State implements Runnable {
        final AtomicBoolean busy = new AtomicBoolean();
        final AtomicInteger pending = new AtomicInteger();
        volatile long handle;
        long raw;                           // the engine's raw batch (wisp_raw; 0 until first used)
        volatile ExecutorService worker;    // submit's thread (null until first used)
        volatile Thread workerThread;

        State(long handle) {
            this.handle = handle;
        }

        volatile boolean closing;           // close() began: new calls are refused

        @Override
        public void run() {
            closing = true;
            ExecutorService w = worker;
            if (w != null && Thread.currentThread() == workerThread) {
                // closed from a future's callback on the worker itself: finish the queued batches here
                for (Runnable queued : w.shutdownNow()) queued.run();
            } else if (w != null) {
                w.shutdown();
                boolean interrupted = false;
                while (true) {
                    try {
                        if (w.awaitTermination(1, TimeUnit.SECONDS)) break;   // finish what was submitted
                    } catch (InterruptedException e) {
                        interrupted = true;
                    }
                }
                if (interrupted) Thread.currentThread().interrupt();
            }
            // a call another thread began before close() finishes first
            while (!busy.compareAndSet(false, true)) Thread.onSpinWait();
            long h = handle, r = raw;
            handle = 0;
            raw = 0;
            if (r != 0) Native.rawFree(r);
            if (h != 0) Native.sessionFree(h);
        }
    }

    private static final AtomicInteger WORKERS = new AtomicInteger();

    private final Model model;
    private final State state;
    private final Cleaner.Cleanable cleanable;
    private volatile List<BadRow> lastBad = Collections.emptyList();

    Session(Model model, String device) {
        this.model = model;
        long h = model.with(m -> Native.sessionNew(m, device));
        state = new State(h);
        cleanable = Wisp.CLEANER.register(this, state);
    }

    /** The model this session scores. */
    public Model model() {
        return model;
    }

    // ---- one thread at a time -------------------------------------------------------

    private long enter() {
        if (state.closing) throw new WispException(WispException.ESTATE, "session is closed");
        if (state.pending.get() > 0)
            throw new WispException(WispException.ESTATE, "the session has submitted batches pending: wait for their futures first");
        long h = enterWorker();
        if (state.closing) {
            leave();
            throw new WispException(WispException.ESTATE, "session is closed");
        }
        return h;
    }

    private long enterWorker() {
        if (!state.busy.compareAndSet(false, true)) {
            if (state.closing) throw new WispException(WispException.ESTATE, "session is closed");
            throw new WispException(WispException.ESTATE,
                    "the session is in use by another thread (a session is used by one thread at a time)");
        }
        long h = state.handle;
        if (h == 0) {
            leave();
            throw new WispException(WispException.ESTATE, "session is closed");
        }
        return h;
    }

    private void leave() {
        state.busy.set(false);
    }

    private float[] finish(float[] out, String[] bad) {
        if (bad == null) {
            if (!lastBad.isEmpty()) lastBad = Collections.emptyList();
            return out;
        }
        List<BadRow> l = new ArrayList<>(bad.length);
        for (String s : bad) l.add(BadRow.parse(s));
        lastBad = Collections.unmodifiableList(l);
        return out;
    }

    /** The rows of the last scoring call that scored NaN, with the engine's reasons (empty when none). */
    public List<BadRow> badRows() {
        return lastBad;
    }

    /**
     * {@link #badRows()}'s name in 0.1.0, kept through 0.1.x (removed in 0.2).
     * @deprecated use {@link #badRows()}
     */
    @Deprecated
    public List<BadRow> lastBadRows() {
        return badRows();
    }

    // ---- scoring ------------------------------------------------------------------------

    /**
     * Score CSR rows: indptr (rows + 1 offsets), indices (feature ids), values
     * (one per feature; null: every feature binary), handed to the engine's one
     * checked entry for CSR arrays (wisp_batch_from_csr, read in place) with
     * scipy's rules: indptr[0] = 0, never decreasing, indptr[rows] =
     * indices.length (= values.length); anything else is WispException EINVAL
     * naming the arrays. Returns one probability per row, NaN for a bad row (a
     * negative id, a value that is not a finite float32, a row of more than
     * 2^20 features: {@link #badRows}).
     */
    public float[] score(int[] indptr, int[] indices, float[] values) {
        Objects.requireNonNull(indptr, "indptr");
        Objects.requireNonNull(indices, "indices");
        float[] out = new float[Math.max(indptr.length - 1, 0)];
        return score(indptr, indices, values, out);
    }

    /** As {@link #score(int[], int[], float[])}, into the caller's out (at least rows long). */
    public float[] score(int[] indptr, int[] indices, float[] values, float[] out) {
        Objects.requireNonNull(indptr, "indptr");
        Objects.requireNonNull(indices, "indices");
        Objects.requireNonNull(out, "out");
        long h = enter();
        try {
            return finish(out, Native.scoreArrays(h, indptr, indices, values, out));
        } finally {
            leave();
        }
    }

    /** Score a batch of direct buffers, read in place (scipy's rules, as for arrays). */
    public float[] score(Batch b) {
        Objects.requireNonNull(b, "batch");
        float[] out = new float[Math.max(b.rows, 0)];
        long h = enter();
        try {
            return finish(out, scoreBatch(h, b, out, null));
        } finally {
            leave();
        }
    }

    /** Score a batch into a direct FloatBuffer (from its position): no copy either way. */
    public void score(Batch b, FloatBuffer out) {
        Objects.requireNonNull(b, "batch");
        Objects.requireNonNull(out, "out");
        if (!out.isDirect() || out.order() != java.nio.ByteOrder.nativeOrder())
            throw new WispException(WispException.EINVAL, "score: out must be a direct FloatBuffer in the platform's byte order");
        long h = enter();
        try {
            finish(null, scoreBatch(h, b, null, out));
        } finally {
            leave();
        }
    }

    private static String[] scoreBatch(long h, Batch b, float[] out, FloatBuffer outBuf) {
        b.acquire();       // an allocated batch's memory stays until the call is done, even if closed meanwhile
        try {
            return scoreAcquired(h, b, out, outBuf);
        } finally {
            b.release();
        }
    }

    /** Score a batch the caller has acquired (and releases). */
    private static String[] scoreAcquired(long h, Batch b, float[] out, FloatBuffer outBuf) {
        return Native.scoreDirect(h, b.indptr, b.indptr.position(), b.indices, b.indices.position(),
                b.indices.remaining(), b.values, b.values == null ? 0 : b.values.position(),
                b.values == null ? 0 : b.values.remaining(), b.rows, out, outBuf,
                outBuf == null ? 0 : outBuf.position());
    }

    /**
     * Score a raw batch of a model with feature columns (the rows of raw inputs,
     * transformed as the model's columns say): one Map per row from input name to
     * value (Float/Double for float32 inputs, Integer/Long for int64, String or
     * byte[] for strings; a List or an array for a sparse input's values; null or
     * absent: missing). A row the engine cannot use (an unknown input, a wrong
     * type, a missing dense input) scores NaN and is listed by {@link #badRows}.
     */
    public float[] scoreRaw(List<? extends Map<String, ?>> rows) {
        Objects.requireNonNull(rows, "rows");
        Inputs in = model.inputs();
        return scoreRawBatch(RawBatch.fromMaps(in, rows));
    }

    /**
     * {@link #scoreRaw(List)}'s name in 0.1.0, kept through 0.1.x (removed in 0.2).
     * @deprecated use {@link #scoreRaw(List)}
     */
    @Deprecated
    public float[] scoreRows(List<? extends Map<String, ?>> rows) {
        return scoreRaw(rows);
    }

    /**
     * Score a raw batch given as columns: input name to an array (float[],
     * double[], int[], long[], String[], Object[]) or a List, each with one
     * entry per row (for a sparse input: each entry a List or an array).
     */
    public float[] scoreColumns(Map<String, ?> columns) {
        Objects.requireNonNull(columns, "columns");
        Inputs in = model.inputs();
        return scoreRawBatch(RawBatch.fromColumns(in, columns));
    }

    private float[] scoreRawBatch(RawBatch r) {
        float[] out = new float[r.rows];
        long h = enter();
        try {
            return finish(out, scoreRawOn(h, r, out));
        } finally {
            leave();
        }
    }

    private String[] scoreRawOn(long h, RawBatch r, float[] out) {
        if (state.raw == 0) state.raw = Native.rawNew(model.columnsHandle());
        return Native.scoreRaw(h, state.raw, r.rows, r.rowStart, r.input, r.kind, r.dv, r.lv, r.str, r.strOff,
                r.rejects(), out);
    }

    // ---- asynchronous scoring ---------------------------------------------------------------

    private ExecutorService worker() {
        ExecutorService w = state.worker;
        if (w != null) return w;
        synchronized (state) {
            if (state.worker == null) {
                int id = WORKERS.incrementAndGet();
                state.worker = Executors.newSingleThreadExecutor(r -> {
                    Thread t = new Thread(r, "wisp-session-" + id);
                    t.setDaemon(true);
                    state.workerThread = t;
                    return t;
                });
            }
            return state.worker;
        }
    }

    private CompletableFuture<float[]> submitTask(LongFunction<String[]> work, float[] out) {
        if (state.closing) throw new WispException(WispException.ESTATE, "session is closed");
        // a call another thread is making now fails this batch's future with ESTATE (enterWorker)
        CompletableFuture<float[]> f = new CompletableFuture<>();
        state.pending.incrementAndGet();
        try {
            worker().execute(() -> {
                String[] bad = null;
                Throwable err = null;
                try {
                    long h = enterWorker();
                    try {
                        bad = work.apply(h);
                    } finally {
                        leave();
                    }
                } catch (Throwable t) {
                    err = t;
                }
                state.pending.decrementAndGet();
                if (err != null) f.completeExceptionally(err);
                else f.complete(finish(out, bad));
            });
        } catch (RuntimeException e) {
            state.pending.decrementAndGet();
            throw new WispException(WispException.ESTATE, "session is closed");
        }
        return f;
    }

    /**
     * Score a batch on the session's own worker thread and return at once.
     * Batches complete in the order they were submitted; until a batch's
     * future completes it belongs to wisp (do not change it), and the session
     * refuses other calls. close() finishes every pending batch first.
     */
    public CompletableFuture<float[]> submit(Batch b) {
        Objects.requireNonNull(b, "batch");
        // acquired now, not when the worker reaches it: a close() after submit() returns keeps the
        // memory until this batch is scored (ESTATE here if it is closed already)
        b.acquire();
        float[] out = new float[Math.max(b.rows, 0)];
        CompletableFuture<float[]> f;
        try {
            f = submitTask(h -> scoreAcquired(h, b, out, null), out);
        } catch (RuntimeException e) {
            b.release();
            throw e;
        }
        // released once the future is done, scored or failed (whenComplete runs even on failure)
        f.whenComplete((r, e) -> b.release());
        return f;
    }

    /** As {@link #submit(Batch)} for CSR arrays (not copied: do not change them until the future completes). */
    public CompletableFuture<float[]> submit(int[] indptr, int[] indices, float[] values) {
        Objects.requireNonNull(indptr, "indptr");
        Objects.requireNonNull(indices, "indices");
        float[] out = new float[Math.max(indptr.length - 1, 0)];
        return submitTask(h -> Native.scoreArrays(h, indptr, indices, values, out), out);
    }

    // ---- placement and statistics ---------------------------------------------------------------

    /** The device asked for ("auto", "gpu:0", ...). */
    public String device() {
        long h = enter();
        try {
            return Native.sessionDevice(h);
        } finally {
            leave();
        }
    }

    /** The device that scored the last batch ("cpu", "gpu:0", "gpus:2", ...). */
    public String lastDevice() {
        long h = enter();
        try {
            return Native.sessionLastDevice(h);
        } finally {
            leave();
        }
    }

    /** Place the session on another device (the same grammar as the CLI's --device). */
    public void setDevice(String device) {
        Objects.requireNonNull(device, "device");
        long h = enter();
        try {
            Native.sessionSetDevice(h, device);
        } finally {
            leave();
        }
    }

    private static volatile String[] statNames;

    /** The session's statistics since the last reset, by wisp_stat_name ("batches", "rows", "ns_kernel", ...). */
    public Map<String, Long> stats() {
        String[] names = statNames;
        if (names == null) statNames = names = Native.statNames();
        long h = enter();
        long[] v;
        try {
            v = Native.sessionStats(h);
        } finally {
            leave();
        }
        Map<String, Long> m = new LinkedHashMap<>();
        for (int i = 0; i < v.length; i++) m.put(names[i], v[i]);
        return Collections.unmodifiableMap(m);
    }

    public void resetStats() {
        long h = enter();
        try {
            Native.sessionResetStats(h);
        } finally {
            leave();
        }
    }

    /**
     * Free the session now: the batches submitted are finished first, and a
     * call another thread is making on it returns first. Closing twice is
     * harmless; any call after it is refused (ESTATE, "session is closed").
     */
    @Override
    public void close() {
        cleanable.clean();
    }

    @Override
    public String toString() {
        return state.closing ? "wisp.Session(closed)" : "wisp.Session(" + model.path() + ")";
    }
}
