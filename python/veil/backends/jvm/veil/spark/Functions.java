package veil.spark;

import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.functions;

/** Registers Veil's JVM server functions in a Spark session (called from Python via Py4J). */
public final class Functions {
  private Functions() {}

  /** {@code name(ciphertext, n_square)}: the aggregate {@link HomSum}. */
  public static void register(SparkSession session, String name) {
    session.udf().register(
        name, functions.udaf(new HomSum(), Encoders.tuple(Encoders.BINARY(), Encoders.BINARY())));
  }
}
