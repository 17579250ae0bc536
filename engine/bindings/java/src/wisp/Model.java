// Model.java — a loaded .wisp model: its accessors, its feature-column inputs, and the sessions made from it.
package wisp;

import java.lang.ref.Cleaner;
import java.util.Objects;

/**
 * A model file loaded and validated ({@code wisp_model_load}). Thread-safe:
 * one Model may be shared by any number of threads and sessions. Sessions
 * keep the engine's model alive, so closing the Model while its sessions are
 * open is allowed (they go on scoring).
 */
public final class Model implements AutoCloseable {
    private static final class State implements Runnable {
        private long handle;
        private long columns;   // the description, 0 when the model has none or it was not needed yet

        State(long handle) {
            this.handle = handle;
        }

        @Override
        public synchronized void run() {
            if (columns != 0) Native.columnsFree(columns);
            if (handle != 0) Native.modelFree(handle);
            columns = 0;
            handle = 0;
        }
    }

    private final State state;
    private final Cleaner.Cleanable cleanable;
    private volatile Inputs inputs;   // the raw inputs of the description, built on first use

    private Model(long handle) {
        state = new State(handle);
        cleanable = Wisp.CLEANER.register(this, state);
    }

    /** Load and validate a .wisp file; WispException (EIO, EFORMAT, ECHECKSUM, ...) naming the file otherwise. */
    public static Model load(String path) {
        Objects.requireNonNull(path, "path");
        Wisp.engine();
        return new Model(Native.modelLoad(path));
    }

    /**
     * Write a model file atomically (wisp_model_write): {@code weights.length}
     * weights stored as dtype ("f32", "f16", "i8"), meta "key=value\n" lines
     * and columns (the description JSON) may be null.
     */
    public static void write(String path, float[] weights, double bias, String dtype, String meta, String columns) {
        Objects.requireNonNull(path, "path");
        Objects.requireNonNull(weights, "weights");
        Native.modelWrite(path, weights, bias, dtype == null ? "f32" : dtype, meta, columns);
    }

    long handle() {
        long h = state.handle;
        if (h == 0) throw new WispException(WispException.ESTATE, "model is closed");
        return h;
    }

    /** Run f on the live handle, holding the model's lock so that close() on another thread waits for it. */
    <T> T with(java.util.function.LongFunction<T> f) {
        synchronized (state) {
            return f.apply(handle());
        }
    }

    public long numFeatures() {
        return with(Native::modelNumFeatures);
    }

    public double bias() {
        return with(Native::modelBias);
    }

    /** "f32", "f16" or "i8". */
    public String dtype() {
        return with(Native::modelDtype);
    }

    public String path() {
        return with(Native::modelPath);
    }

    /** The value of a meta key ("source", "labels", ...), or null. */
    public String meta(String key) {
        Objects.requireNonNull(key, "key");
        return with(h -> Native.modelMeta(h, key));
    }

    /** The whole meta text ("key=value" lines). */
    public String meta() {
        return with(Native::modelMetaText);
    }

    /** The column description (JSON), or null when the model has none. */
    public String columns() {
        String c = with(Native::modelColumns);
        return c == null || c.isEmpty() ? null : c;
    }

    /** The weight of feature id, dequantized; 0 out of range. */
    public float weight(long id) {
        return with(h -> Native.modelWeight(h, id));
    }

    /** A session on device ("cpu", "gpu", "gpu:N", "gpus", "gpus:N", "auto"). */
    public Session session(String device) {
        return new Session(this, device == null ? "auto" : device);
    }

    /** A session on "auto". */
    public Session session() {
        return session("auto");
    }

    /** The raw inputs of the description, parsed once (WispException ESTATE when the model has none). */
    Inputs inputs() {
        Inputs in = inputs;
        if (in != null) return in;
        synchronized (state) {
            if (inputs != null) return inputs;
            long h = handle();
            if (state.columns == 0) state.columns = Native.columnsNew(h);
            if (state.columns == 0)
                throw new WispException(WispException.ESTATE, path() + ": the model has no feature columns (no \"columns\" section): score CSR rows instead");
            inputs = new Inputs(Native.columnsInputs(state.columns));
            return inputs;
        }
    }

    /** The description's handle (for a session's raw batch; the raw batch keeps it alive). */
    long columnsHandle() {
        inputs();
        synchronized (state) {
            handle();
            return state.columns;
        }
    }

    /** Free the model now (sessions made from it keep scoring). Closing twice is harmless. */
    @Override
    public void close() {
        cleanable.clean();
    }

    @Override
    public String toString() {
        synchronized (state) {
            return state.handle == 0 ? "wisp.Model(closed)"
                    : "wisp.Model(" + path() + ", " + numFeatures() + " features, " + dtype() + ")";
        }
    }
}
