// pgjdbc against `veil serve`: runs each SQL file it is given and prints the rows.
//
// Usage: java -cp postgresql.jar WireClient.java JDBC_URL FILE...
// Each file holds one statement. Output per file: "== name", then one line per
// row of tab-separated values (NULL for null; numbers as BigDecimal's plain
// string; everything else as getString), then "== rows N". A statement with
// "?" markers reads its parameters from a "-- params: a, b" first line and runs
// as a PreparedStatement six times (pgjdbc switches to a server-prepared
// statement with binary transfer after five). A failing statement prints
// "== error SQLSTATE message" and the next file runs.
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.Statement;
import java.sql.Types;

public class WireClient {
    public static void main(String[] args) throws Exception {
        try (Connection connection = DriverManager.getConnection(args[0])) {
            if (args.length > 1 && args[1].equals("--metadata")) {
                metadata(connection);
                return;
            }
            for (int i = 1; i < args.length; i++) {
                Path file = Path.of(args[i]);
                String sql = Files.readString(file);
                System.out.println("== " + file.getFileName());
                try {
                    run(connection, sql);
                } catch (java.sql.SQLException failed) {
                    System.out.println("== error " + failed.getSQLState() + " " + failed.getMessage().replace('\n', ' '));
                }
            }
        }
    }

    static void run(Connection connection, String sql) throws Exception {
                if (sql.startsWith("-- params:")) {
                    String[] params = sql.substring(10, sql.indexOf('\n')).trim().split(",\\s*");
                    try (PreparedStatement prepared = connection.prepareStatement(sql)) {
                        for (int p = 0; p < params.length; p++) {
                            prepared.setObject(p + 1, parse(params[p]));
                        }
                        for (int run = 1; run < 6; run++) {
                            prepared.executeQuery().close();
                        }
                        print(prepared.executeQuery());
                    }
                } else {
                    try (Statement statement = connection.createStatement()) {
                        print(statement.executeQuery(sql));
                    }
                }
    }

    /** What a database browser (DBeaver, DataGrip) asks through JDBC's DatabaseMetaData. */
    static void metadata(Connection connection) throws Exception {
        java.sql.DatabaseMetaData meta = connection.getMetaData();
        System.out.println("== product " + meta.getDatabaseProductName() + " " + meta.getDatabaseProductVersion());
        System.out.println("== schemas");
        print(meta.getSchemas());
        System.out.println("== tables");
        print(meta.getTables(null, null, "%", new String[] {"TABLE"}));
        System.out.println("== columns");
        print(meta.getColumns(null, null, "region", "%"));
        System.out.println("== primary keys");
        print(meta.getPrimaryKeys(null, null, "region"));
        System.out.println("== indexes");
        print(meta.getIndexInfo(null, null, "region", false, true));
    }

    static Object parse(String text) {
        try {
            return Long.parseLong(text);
        } catch (NumberFormatException notLong) {
            return text;
        }
    }

    static void print(ResultSet rows) throws Exception {
        ResultSetMetaData meta = rows.getMetaData();
        int count = 0;
        while (rows.next()) {
            StringBuilder line = new StringBuilder();
            for (int c = 1; c <= meta.getColumnCount(); c++) {
                if (c > 1) {
                    line.append('\t');
                }
                Object value = rows.getObject(c);
                if (value == null) {
                    line.append("NULL");
                } else if (isNumber(meta.getColumnType(c))) {
                    line.append(rows.getBigDecimal(c).toPlainString());
                } else {
                    line.append(rows.getString(c));
                }
            }
            System.out.println(line);
            count++;
        }
        System.out.println("== rows " + count);
        rows.close();
    }

    static boolean isNumber(int type) {
        return type == Types.BIGINT || type == Types.INTEGER || type == Types.SMALLINT
            || type == Types.NUMERIC || type == Types.DECIMAL || type == Types.DOUBLE
            || type == Types.REAL || type == Types.FLOAT;
    }
}
