// Quickstart.java — the Java binding (package wisp) in one page: write a model, load it, score two rows.
//
//   make java && java -cp build/wisp.jar examples/Quickstart.java
// (Java 17 runs a single source file directly; the native library comes from inside the jar.)
import wisp.*;

public class Quickstart {
    public static void main(String[] args) {
        String path = "quickstart-java.wisp";
        float[] weights = {0f, 0.5f, -0.25f, 1f, 0f, 0f, 0f, 2f};
        Model.write(path, weights, -0.5, "f32", "source=quickstart\n", null);
        try (Model m = Model.load(path); Session s = m.session("auto")) {
            // two rows in CSR: a valued row (ids 1, 3, 7) and a binary one (ids 1, 3: values 1)
            float[] p = s.score(new int[] {0, 3, 5}, new int[] {1, 3, 7, 1, 3},
                                new float[] {2f, 1f, 0.5f, 1f, 1f});
            System.out.printf("p = %.6f %.6f on %s%n", p[0], p[1], s.lastDevice());
        } catch (WispException e) {
            System.err.println("quickstart: " + e.statusName() + ": " + e.getMessage());
            System.exit(1);
        } finally {
            new java.io.File(path).delete();
        }
    }
}
