// WispException.java — a failed wisp call: the engine's status code (WISP_E*), its name and the engine's message.
package wisp;

/**
 * Thrown when the engine returns a failing status, with the status code of
 * wisp.h (negative: {@link #EINVAL}, {@link #EIO}, ...) and the engine's
 * message (wisp_errmsg(): it names the file, line or argument). Argument
 * errors the binding finds itself (array lengths, bounds) are {@link #EINVAL}
 * too; using a closed object or a session another thread is using is
 * {@link #ESTATE}. A null argument is a NullPointerException, as in the JDK.
 */
public class WispException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public static final int EINVAL = -1, ENOMEM = -2, EIO = -3, EFORMAT = -4, ECHECKSUM = -5, EVERSION = -6,
            EPARSE = -7, ELIMIT = -8, ENODEV = -9, EDEVICE = -10, ESTATE = -11;

    private final int status;

    public WispException(int status, String message) {
        super(message);
        this.status = status;
    }

    /** The status code of wisp.h (a negative WISP_E* value). */
    public int status() {
        return status;
    }

    /** The status code's name, "WISP_EPARSE" for example. */
    public String statusName() {
        return statusName(status);
    }

    static String statusName(int status) {
        switch (status) {
        case EINVAL: return "WISP_EINVAL";
        case ENOMEM: return "WISP_ENOMEM";
        case EIO: return "WISP_EIO";
        case EFORMAT: return "WISP_EFORMAT";
        case ECHECKSUM: return "WISP_ECHECKSUM";
        case EVERSION: return "WISP_EVERSION";
        case EPARSE: return "WISP_EPARSE";
        case ELIMIT: return "WISP_ELIMIT";
        case ENODEV: return "WISP_ENODEV";
        case EDEVICE: return "WISP_EDEVICE";
        case ESTATE: return "WISP_ESTATE";
        default: return "WISP_E(" + status + ")";
        }
    }

    @Override
    public String toString() {
        return "wisp.WispException: " + statusName() + ": " + getMessage();
    }
}
