import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;

/**
 * Consume-transform-produce in transactions: a group member (read_committed) reads the input
 * topic; a transactional producer writes each record transformed to the output topic and sends
 * the input offsets with sendOffsetsToTransaction. The first transaction is aborted (the member
 * then goes back to its committed offsets), the second, over the same records, committed. Then
 * the output as a read_committed and a read_uncommitted reader see it, and the group's offsets.
 *
 * Args: --bootstrap= --input= --output= --group= --transactional-id= --expected=N
 */
public final class Txn {
    public static void main(String[] argv) throws Exception {
        var args = Common.argMap(argv);
        String bootstrap = args.get("bootstrap");
        String input = args.get("input");
        String output = args.get("output");
        String group = args.get("group");
        int expected = Integer.parseInt(args.get("expected"));

        Properties cp = Common.consumerProps(bootstrap, group);
        cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        Properties pp = Common.producerProps(bootstrap);
        pp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, args.get("transactional-id"));
        pp.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "60000");
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(cp);
                KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(pp)) {
            producer.initTransactions();
            consumer.subscribe(List.of(input));
            for (String outcome : new String[] {"abort", "commit"}) {
                List<ConsumerRecord<byte[], byte[]>> batch = readBatch(consumer, expected);
                producer.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
                for (ConsumerRecord<byte[], byte[]> r : batch) {
                    byte[] value = (outcome + ":" + new String(r.value(), StandardCharsets.UTF_8).toUpperCase())
                            .getBytes(StandardCharsets.UTF_8);
                    producer.send(new ProducerRecord<>(output, r.key(), value));
                    next.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                producer.sendOffsetsToTransaction(next, consumer.groupMetadata());
                if (outcome.equals("abort")) {
                    // Flushed first: an abort drops what is still unsent, and the test wants the
                    // aborted records in the log for read_committed to skip.
                    producer.flush();
                    producer.abortTransaction();
                    // As after any abort: go back to the last committed offsets (none yet: the beginning).
                    Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(consumer.assignment());
                    for (TopicPartition tp : consumer.assignment()) {
                        OffsetAndMetadata om = committed.get(tp);
                        if (om == null) consumer.seekToBeginning(List.of(tp));
                        else consumer.seek(tp, om.offset());
                    }
                } else {
                    producer.commitTransaction();
                }
                Json.emit(outcome, "records", batch.size(), "offsets", Common.offsets(next));
            }
            Map<TopicPartition, Object> committed = new HashMap<>();
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : consumer.committed(consumer.assignment()).entrySet()) {
                committed.put(e.getKey(), e.getValue() == null ? null : e.getValue().offset());
            }
            Json.emit("committed", "offsets", Common.offsets(committed));
        }
        Json.emit("read_committed", "records", Common.records(Common.readAll(bootstrap, output, "read_committed")));
        Json.emit("read_uncommitted", "records",
                Common.records(Common.readAll(bootstrap, output, "read_uncommitted")));
    }

    /** Poll until ``expected`` records arrived (the group has one member: all partitions are ours). */
    static List<ConsumerRecord<byte[], byte[]>> readBatch(KafkaConsumer<byte[], byte[]> consumer, int expected) {
        List<ConsumerRecord<byte[], byte[]>> out = new ArrayList<>();
        long deadline = System.currentTimeMillis() + Common.DEADLINE_MS;
        while (out.size() < expected) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("read " + out.size() + " of " + expected + " input records");
            }
            for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) out.add(r);
        }
        return out;
    }
}
