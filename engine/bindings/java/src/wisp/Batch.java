// Batch.java — CSR rows in direct buffers that the engine reads in place: wrapped caller buffers or memory wisp allocates.
package wisp;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import java.util.Objects;

/**
 * A batch of rows in CSR form over java.nio direct buffers, read in place by
 * the engine (no copy):
 * <ul>
 * <li>indptr: rows + 1 ints, indptr[0] = 0, never decreasing; row r's features are
 *     indices[indptr[r] .. indptr[r+1]);</li>
 * <li>indices: feature ids (ints; a negative id makes its row bad), indptr[rows] of them;</li>
 * <li>values: one float per feature, or null for binary rows (every value 1).</li>
 * </ul>
 * Each buffer is read from its position to its limit (its remaining elements:
 * rows + 1 for indptr, exactly indptr[rows] for indices and values, as scipy
 * requires; set the limit of a larger buffer); it must be direct and in the
 * platform's byte order ({@code ByteBuffer.allocateDirect(n).order(ByteOrder.nativeOrder())}).
 * The session hands the buffers to the engine's one checked entry for CSR input
 * (wisp_batch_from_csr), which reads them in place.
 * {@link #allocate} gives buffers in memory wisp allocates
 * (wisp_engine_host_alloc): page-locked (pinned) when the engine has a usable
 * GPU, so a GPU session copies it in one DMA, with no staging copy;
 * {@link #pinned()} says whether it is. {@link #close()} gives that memory
 * back at once, so the buffers of an allocated batch must not be used after
 * it (the batch's own accessors then throw). A batch is used by one thread at
 * a time and must not change while a session scores it (or while a submitted
 * score of it is pending).
 */
public final class Batch implements AutoCloseable {
    final IntBuffer indptr, indices;
    final FloatBuffer values;
    final int rows;
    /** The memory of an allocated batch; null for a wrapped one. */
    private final HostMemory memory;
    private volatile boolean closed;
    /** Scores using the batch now (guarded by this); close() frees the memory after the last. */
    private int users;

    private Batch(IntBuffer indptr, IntBuffer indices, FloatBuffer values, HostMemory memory) {
        this.indptr = indptr;
        this.indices = indices;
        this.values = values;
        this.rows = indptr.remaining() - 1;
        this.memory = memory;
    }

    private static void check(java.nio.Buffer b, ByteOrder order, String what) {
        if (!b.isDirect())
            throw new WispException(WispException.EINVAL, "Batch.wrap: " + what + " is not a direct buffer (ByteBuffer.allocateDirect(n).order(ByteOrder.nativeOrder()).as...Buffer())");
        if (order != ByteOrder.nativeOrder())
            throw new WispException(WispException.EINVAL, "Batch.wrap: " + what + " is " + order + ", not the platform's byte order (" + ByteOrder.nativeOrder() + ")");
    }

    /** A batch over the caller's direct buffers (values may be null: binary rows). */
    public static Batch wrap(IntBuffer indptr, IntBuffer indices, FloatBuffer values) {
        Objects.requireNonNull(indptr, "indptr");
        Objects.requireNonNull(indices, "indices");
        check(indptr, indptr.order(), "indptr");
        check(indices, indices.order(), "indices");
        if (values != null) check(values, values.order(), "values");
        if (indptr.remaining() < 1)
            throw new WispException(WispException.EINVAL, "Batch.wrap: indptr is empty (it has rows + 1 entries)");
        return new Batch(indptr, indices, values, null);
    }

    /**
     * A batch of `rows` rows and `nnz` features in memory wisp allocates
     * (pinned when a GPU is usable), valued when {@code valued}. Fill
     * {@link #indptr()}, {@link #indices()} and {@link #values()}, then score it.
     * Throws WispException ENOMEM (with the engine's message) when the
     * memory cannot be had.
     */
    public static Batch allocate(int rows, int nnz, boolean valued) {
        if (rows < 0 || nnz < 0)
            throw new WispException(WispException.EINVAL, "Batch.allocate: rows and nnz must be >= 0 (got " + rows + ", " + nnz + ")");
        long bytes = 4L * (rows + 1) + 4L * nnz + (valued ? 4L * nnz : 0) + 2 * 64;
        if (bytes > Integer.MAX_VALUE)
            throw new WispException(WispException.ELIMIT, "Batch.allocate: " + bytes + " bytes, more than one direct buffer holds (2 GiB)");
        HostMemory mem = HostMemory.allocate(bytes);
        ByteBuffer block = mem.buffer;
        int off = 0;
        IntBuffer p = slice(block, off, 4 * (rows + 1)).asIntBuffer();
        off = align(off + 4 * (rows + 1));
        IntBuffer i = slice(block, off, 4 * nnz).asIntBuffer();
        off = align(off + 4 * nnz);
        FloatBuffer v = valued ? slice(block, off, 4 * nnz).asFloatBuffer() : null;
        return new Batch(p, i, v, mem);
    }

    /** A batch of rows and nnz valued features (see {@link #allocate(int, int, boolean)}). */
    public static Batch allocate(int rows, int nnz) {
        return allocate(rows, nnz, true);
    }

    /** Copy CSR arrays into a new {@link #allocate}d batch (values may be null). */
    public static Batch of(int[] indptr, int[] indices, float[] values) {
        Objects.requireNonNull(indptr, "indptr");
        Objects.requireNonNull(indices, "indices");
        if (indptr.length < 1) throw new WispException(WispException.EINVAL, "Batch.of: indptr is empty (it has rows + 1 entries)");
        Batch b = allocate(indptr.length - 1, indices.length, values != null);
        b.indptr.put(0, indptr);
        b.indices.put(0, indices);
        if (values != null) {
            if (values.length != indices.length)
                throw new WispException(WispException.EINVAL, "Batch.of: " + values.length + " values for " + indices.length + " indices");
            b.values.put(0, values);
        }
        return b;
    }

    private static int align(int off) {
        return (off + 63) & ~63;
    }

    private static ByteBuffer slice(ByteBuffer block, int off, int len) {
        return block.slice(off, len).order(ByteOrder.nativeOrder());
    }

    public int rows() {
        return rows;
    }

    /** The row offsets (rows + 1 ints). ESTATE once an allocated batch is closed (its memory is gone). */
    public IntBuffer indptr() {
        checkMemory();
        return indptr;
    }

    public IntBuffer indices() {
        checkMemory();
        return indices;
    }

    /** The values, or null for a binary batch. */
    public FloatBuffer values() {
        checkMemory();
        return values;
    }

    /** Whether the memory is page-locked: an allocated batch the engine pinned (it has a usable GPU). */
    public boolean pinned() {
        return memory != null && memory.pinned;
    }

    void checkOpen() {
        if (closed) throw new WispException(WispException.ESTATE, "batch is closed");
    }

    private void checkMemory() {
        if (memory != null && closed)
            throw new WispException(WispException.ESTATE, "batch is closed (its memory was given back)");
    }

    /** Mark a score using the batch (ESTATE if it is closed); pair with {@link #release()}. */
    synchronized void acquire() {
        checkOpen();
        users++;
    }

    /** A score is done with the batch: free the memory if close() came while it ran. */
    void release() {
        boolean free;
        synchronized (this) {
            free = --users == 0 && closed;
        }
        if (free && memory != null) memory.free();
    }

    /**
     * Close the batch: sessions refuse it from now on. An allocated batch's
     * memory goes back to the engine (wisp_engine_host_free) now, or when a
     * score running on it (a pending submit) finishes: do not use its
     * buffers afterwards. A batch never closed is freed by the Cleaner once
     * neither it nor its buffers are reachable. Closing twice is harmless.
     */
    @Override
    public void close() {
        synchronized (this) {
            if (closed) return;
            closed = true;
            if (users > 0) return;
        }
        if (memory != null) memory.free();
    }
}
