// HostMemory.java — the memory Batch.allocate hands out: direct buffers, 64-byte aligned, in the platform's byte order.
package wisp;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

final class HostMemory {
    private HostMemory() {}

    /** A direct buffer of at least `bytes` bytes, its start 64-byte aligned. */
    static ByteBuffer allocate(int bytes) {
        ByteBuffer b = ByteBuffer.allocateDirect(bytes + 64);
        return b.alignedSlice(64).order(ByteOrder.nativeOrder());
    }

    static boolean isPinned(ByteBuffer b) {
        return false;
    }
}
