// HostMemory.java — the memory Batch.allocate hands out: wisp_engine_host_alloc's block (page-locked when a GPU is usable, 64-byte aligned) as a direct buffer in the platform's byte order, freed by free() or the Cleaner.
package wisp;

import java.lang.ref.Cleaner;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;

final class HostMemory {
    /** The block; every slice and view of it keeps it reachable. */
    final ByteBuffer buffer;
    /** Whether the engine page-locked it (wisp_engine_host_pinned). */
    final boolean pinned;
    private final Cleaner.Cleanable cleanable;

    private HostMemory(ByteBuffer buffer, long address) {
        this.buffer = buffer;
        this.pinned = Native.hostPinned(address);
        // registered on the buffer, not its owner: the net frees the block only once
        // neither the buffer nor any view of it is reachable
        this.cleanable = Wisp.CLEANER.register(buffer, new Free(address));
    }

    /** A block of `bytes` bytes from the engine (WispException ENOMEM when none is left). */
    static HostMemory allocate(long bytes) {
        Wisp.engine();
        ByteBuffer b = Native.hostAlloc(bytes).order(ByteOrder.nativeOrder());
        return new HostMemory(b, Native.bufferAddress(b));
    }

    /** Give the block back to the engine now; the second call does nothing. */
    void free() {
        cleanable.clean();
    }

    /* holds the address only, never the buffer, so the buffer can become unreachable */
    private static final class Free implements Runnable {
        private final long address;

        Free(long address) {
            this.address = address;
        }

        @Override
        public void run() {
            Native.hostFree(address);
        }
    }
}
