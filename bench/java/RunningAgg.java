/*
 * The running aggregate of the spark_jvm benchmark suite as a Java StatefulProcessor, on Spark's
 * own transformWithState (RocksDB state store): count and sum(v) per key k in a ValueState, one
 * output row (k, n, s) per key and micro-batch, TimeMode None, OutputMode Update. The same
 * processor as bench.harness.operator_queries.RunningAgg (pandas) and RunningAggRow (Row).
 *
 * Compiled by the suite at run time (javac against the jars of PySpark's jars/ directory) and
 * put on the session's classpath with spark.jars; Python calls start() through py4j with the
 * streaming Dataset of the input (df._jdf) and reads the returned StreamingQuery's progress.
 *
 * Invariants: the sink is the one every query of the suite has: foreachBatch writing the batch
 * to Spark's noop format, except for the checked batch ids, whose output checksum (rows, sum n,
 * sum s, sum crc32(k)) is kept for checksum() instead; nothing here is timed.
 */
package fsstate.bench;

import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeoutException;

import org.apache.spark.api.java.function.MapFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.StreamingQuery;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.Trigger;
import org.apache.spark.sql.streaming.ValueState;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import scala.Tuple2;
import scala.jdk.javaapi.CollectionConverters;

public final class RunningAgg extends StatefulProcessor<String, Row, Row> {
  private static final long serialVersionUID = 1L;

  /** The output schema: k STRING, n BIGINT, s BIGINT. */
  public static final StructType OUTPUT = new StructType()
      .add("k", DataTypes.StringType)
      .add("n", DataTypes.LongType)
      .add("s", DataTypes.LongType);

  /** Checksums of the checked batches: "query name/batch id" -> "rows,sum n,sum s,sum crc32". */
  private static final Map<String, String> SUMS = new ConcurrentHashMap<>();

  private final int valueIndex;
  private transient ValueState<Tuple2<Long, Long>> agg;

  public RunningAgg(int valueIndex) {
    this.valueIndex = valueIndex;
  }

  @Override
  public void init(OutputMode outputMode, TimeMode timeMode) {
    agg = getHandle().getValueState(
        "agg", Encoders.tuple(Encoders.LONG(), Encoders.LONG()), TTLConfig.NONE());
  }

  @Override
  public scala.collection.Iterator<Row> handleInputRows(
      String key, scala.collection.Iterator<Row> rows, TimerValues timerValues) {
    long n = 0;
    long s = 0;
    while (rows.hasNext()) {
      Row row = rows.next();
      n += 1;
      s += row.getLong(valueIndex);
    }
    Tuple2<Long, Long> old = agg.get();
    if (old != null) {
      n += old._1();
      s += old._2();
    }
    agg.update(new Tuple2<>(n, s));
    Row out = RowFactory.create(key, n, s);
    return CollectionConverters.asScala(List.of(out).iterator());
  }

  /**
   * Start the running aggregate over {@code input} (columns k STRING and v BIGINT at least).
   *
   * @param input the streaming input (a Python DataFrame's _jdf)
   * @param checkpoint the query's checkpoint location
   * @param name the query's name
   * @param trigger a processing-time trigger interval ("500 milliseconds")
   * @param checked the batch ids whose output checksum is kept instead of written, comma-separated
   * @return the started query
   */
  public static StreamingQuery start(
      Dataset<Row> input, String checkpoint, String name, String trigger, String checked)
      throws TimeoutException {
    StructType schema = input.schema();
    int keyIndex = schema.fieldIndex("k");
    int valueIndex = schema.fieldIndex("v");
    Set<Long> ids = new HashSet<>();
    for (String id : checked.split(",")) {
      if (!id.isBlank()) {
        ids.add(Long.parseLong(id.trim()));
      }
    }
    Dataset<Row> out = input
        .groupByKey((MapFunction<Row, String>) r -> r.getString(keyIndex), Encoders.STRING())
        .transformWithState(
            new RunningAgg(valueIndex), TimeMode.None(), OutputMode.Update(),
            Encoders.row(OUTPUT));
    return out.writeStream()
        .queryName(name)
        .outputMode("update")
        .option("checkpointLocation", checkpoint)
        .trigger(Trigger.ProcessingTime(trigger))
        .foreachBatch((Dataset<Row> batch, Long id) -> sink(name, ids, batch, id))
        .start();
  }

  private static void sink(String name, Set<Long> checked, Dataset<Row> batch, long id) {
    if (!checked.contains(id)) {
      batch.write().format("noop").mode("overwrite").save();
      return;
    }
    Row row = batch.agg(
        functions.count(functions.lit(1)),
        functions.sum("n"),
        functions.sum("s"),
        functions.sum(functions.crc32(functions.col("k")))).first();
    SUMS.put(name + "/" + id, row.getLong(0) + "," + orZero(row, 1) + "," + orZero(row, 2)
        + "," + orZero(row, 3));
  }

  private static long orZero(Row row, int i) {
    return row.isNullAt(i) ? 0L : row.getLong(i);
  }

  /** The checksum of batch {@code id} of query {@code name}, or null if not kept. */
  public static String checksum(String name, long id) {
    return SUMS.get(name + "/" + id);
  }
}
