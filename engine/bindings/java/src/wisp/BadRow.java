// BadRow.java — one row a scoring call answered NaN, with the engine's reason.
package wisp;

/** A row of the last call that scored NaN because its input was malformed, and why. */
public final class BadRow {
    public final int row;
    public final String message;

    BadRow(int row, String message) {
        this.row = row;
        this.message = message;
    }

    static BadRow parse(String line) {
        int tab = line.indexOf('\t');
        return new BadRow(Integer.parseInt(line.substring(0, tab)), line.substring(tab + 1));
    }

    @Override
    public String toString() {
        return "row " + row + ": " + message;
    }
}
