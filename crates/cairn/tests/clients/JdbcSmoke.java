// pgJDBC smoke test of Cairn's PostgreSQL front end.
//
// Run: java -cp /usr/share/java/postgresql.jar JdbcSmoke.java [PORT]
//      (default: $CAIRN_PG_PORT, then 5433; $CAIRN_PG_PASSWORD if a password is needed)
//
// Checks PreparedStatement parameters (past pgJDBC's prepareThreshold, where it switches
// to named server-side statements and binary results), executeUpdate and batch counts,
// SQLSTATEs (23505, 42P01), DatabaseMetaData getTables/getPrimaryKeys/getColumns/
// getTypeInfo, transactions and the
// isolation level. The table name is unique per run; the table is dropped at the end.
// Exits non-zero on the first failure.

import java.math.BigDecimal;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Types;
import java.util.Properties;
import java.util.UUID;

public class JdbcSmoke {
    static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }

    static void expectState(Statement s, String sql, String state) {
        try {
            s.execute(sql);
        } catch (SQLException e) {
            check(state.equals(e.getSQLState()),
                    sql + ": expected SQLSTATE " + state + ", got " + e.getSQLState() + ": " + e.getMessage());
            return;
        }
        throw new AssertionError(sql + ": expected SQLSTATE " + state + ", but it succeeded");
    }

    public static void main(String[] args) throws Exception {
        String port = args.length > 0 ? args[0] : System.getenv().getOrDefault("CAIRN_PG_PORT", "5433");
        String url = "jdbc:postgresql://127.0.0.1:" + port + "/cairn";
        Properties props = new Properties();
        props.setProperty("user", System.getenv().getOrDefault("CAIRN_PG_USER", "cairn"));
        String password = System.getenv("CAIRN_PG_PASSWORD");
        if (password != null) {
            props.setProperty("password", password);
        }
        props.setProperty("connectTimeout", "10");
        String table = "jdbc_smoke_" + UUID.randomUUID().toString().replace("-", "").substring(0, 12);

        try (Connection c = DriverManager.getConnection(url, props)) {
            try {
                run(c, table);
            } finally {
                c.setAutoCommit(true);
                try (Statement s = c.createStatement()) {
                    s.executeUpdate("DROP TABLE IF EXISTS " + table);
                }
            }
        }
        System.out.println("JdbcSmoke: OK");
    }

    static void run(Connection c, String table) throws Exception {
        DatabaseMetaData md = c.getMetaData();
        System.out.println("server: " + md.getDatabaseProductName() + " " + md.getDatabaseProductVersion());
        check(c.getTransactionIsolation() == Connection.TRANSACTION_READ_COMMITTED, "isolation level");

        try (Statement s = c.createStatement()) {
            int n = s.executeUpdate("CREATE TABLE " + table
                    + " (id BIGINT PRIMARY KEY, name VARCHAR, score DOUBLE, price DECIMAL(10, 2), born DATE)");
            check(n == 0, "CREATE TABLE count " + n);
        }

        // Ten executions cross pgJDBC's prepareThreshold (5): later ones use a named
        // server-side statement.
        String insert = "INSERT INTO " + table + " (id, name, score, price, born) VALUES (?, ?, ?, ?, ?)";
        try (PreparedStatement ps = c.prepareStatement(insert)) {
            for (int i = 1; i <= 10; i++) {
                ps.setLong(1, i);
                ps.setString(2, "n" + i);
                ps.setDouble(3, i * 1.5);
                ps.setBigDecimal(4, new BigDecimal(i + ".25"));
                ps.setDate(5, java.sql.Date.valueOf(String.format("2024-01-%02d", i)));
                check(ps.executeUpdate() == 1, "INSERT count for row " + i);
            }
            ps.setLong(1, 11);
            ps.setNull(2, Types.VARCHAR);
            ps.setNull(3, Types.DOUBLE);
            ps.setNull(4, Types.DECIMAL);
            ps.setNull(5, Types.DATE);
            check(ps.executeUpdate() == 1, "INSERT of NULLs");
            for (int i = 12; i <= 14; i++) {
                ps.setLong(1, i);
                ps.setString(2, "batch" + i);
                ps.setDouble(3, 0.5);
                ps.setBigDecimal(4, new BigDecimal("0.01"));
                ps.setDate(5, java.sql.Date.valueOf("2024-02-29"));
                ps.addBatch();
            }
            int[] counts = ps.executeBatch();
            check(counts.length == 3, "batch length " + counts.length);
            for (int k : counts) {
                check(k == 1 || k == Statement.SUCCESS_NO_INFO, "batch count " + k);
            }
        }

        String select = "SELECT id, name, score, price, born FROM " + table + " WHERE id = ?";
        try (PreparedStatement ps = c.prepareStatement(select)) {
            for (int k = 0; k < 8; k++) {
                ps.setLong(1, 3);
                try (ResultSet rs = ps.executeQuery()) {
                    check(rs.next(), "row 3 found (execution " + k + ")");
                    check(rs.getLong(1) == 3, "id");
                    check("n3".equals(rs.getString(2)), "name " + rs.getString(2));
                    check(rs.getDouble(3) == 4.5, "score " + rs.getDouble(3));
                    check(rs.getBigDecimal(4).compareTo(new BigDecimal("3.25")) == 0, "price " + rs.getBigDecimal(4));
                    check("2024-01-03".equals(rs.getDate(5).toString()), "born " + rs.getDate(5));
                    check(!rs.next(), "one row only");
                }
            }
            ps.setLong(1, 11);
            try (ResultSet rs = ps.executeQuery()) {
                check(rs.next(), "row 11 found");
                check(rs.getString(2) == null && rs.wasNull(), "NULL name");
                rs.getDouble(3);
                check(rs.wasNull(), "NULL score");
                check(rs.getBigDecimal(4) == null && rs.getDate(5) == null, "NULL price and born");
            }
        }

        try (PreparedStatement ps = c.prepareStatement("UPDATE " + table + " SET score = ? WHERE id <= ?")) {
            ps.setDouble(1, 100.0);
            ps.setLong(2, 5);
            int n = ps.executeUpdate();
            check(n == 5, "UPDATE count " + n);
        }
        try (PreparedStatement ps = c.prepareStatement("DELETE FROM " + table + " WHERE id > ?")) {
            ps.setLong(1, 10);
            int n = ps.executeUpdate();
            check(n == 4, "DELETE count " + n);
        }
        try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery("SELECT count(*), sum(score) FROM " + table)) {
            check(rs.next(), "count row");
            check(rs.getLong(1) == 10, "count " + rs.getLong(1));
        }

        try (Statement s = c.createStatement()) {
            expectState(s, "INSERT INTO " + table + " (id, name) VALUES (1, 'dup')", "23505");
            expectState(s, "SELECT * FROM no_such_table_jdbc_smoke", "42P01");
            try (ResultSet rs = s.executeQuery("SELECT 1")) {
                check(rs.next() && rs.getInt(1) == 1, "SELECT 1 after errors");
            }
        }

        // Transactions: accepted, every statement commits on its own.
        c.setAutoCommit(false);
        try (PreparedStatement ps = c.prepareStatement("INSERT INTO " + table + " (id, name) VALUES (?, ?)")) {
            ps.setLong(1, 20);
            ps.setString(2, "tx");
            check(ps.executeUpdate() == 1, "INSERT in a transaction");
        }
        c.commit();
        c.setAutoCommit(true);

        try (ResultSet rs = md.getTables(null, null, table, new String[] {"TABLE"})) {
            check(rs.next(), "getTables finds " + table);
            check(table.equals(rs.getString("TABLE_NAME")), "TABLE_NAME " + rs.getString("TABLE_NAME"));
            check("TABLE".equals(rs.getString("TABLE_TYPE")), "TABLE_TYPE " + rs.getString("TABLE_TYPE"));
            check(!rs.next(), "getTables returns one table");
        }

        // The metadata ORMs and tools read: the primary key, the columns, the types.
        try (ResultSet rs = md.getPrimaryKeys(null, null, table)) {
            check(rs.next(), "getPrimaryKeys finds the key");
            check("id".equals(rs.getString("COLUMN_NAME")), "key column " + rs.getString("COLUMN_NAME"));
            check(rs.getInt("KEY_SEQ") == 1, "KEY_SEQ " + rs.getInt("KEY_SEQ"));
            check((table + "_pkey").equals(rs.getString("PK_NAME")), "PK_NAME " + rs.getString("PK_NAME"));
            check(!rs.next(), "one key column");
        }
        try (ResultSet rs = md.getColumns(null, null, table, null)) {
            String[] want = {"id", "name", "score", "price", "born"};
            for (int i = 0; i < want.length; i++) {
                check(rs.next(), "getColumns row " + i);
                check(want[i].equals(rs.getString("COLUMN_NAME")), "column " + rs.getString("COLUMN_NAME"));
                check(rs.getInt("ORDINAL_POSITION") == i + 1, "ORDINAL_POSITION " + rs.getInt("ORDINAL_POSITION"));
            }
            check(!rs.next(), "five columns");
        }
        try (ResultSet rs = md.getTypeInfo()) {
            boolean int8 = false;
            while (rs.next()) {
                int8 |= "int8".equals(rs.getString("TYPE_NAME"));
            }
            check(int8, "getTypeInfo lists int8");
        }
    }
}
