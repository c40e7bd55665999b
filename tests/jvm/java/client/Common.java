import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/** What every scenario program shares: client settings, reading a topic to its end, a record as JSON. */
final class Common {
    private Common() {}

    static final long DEADLINE_MS = 90_000;

    static Properties producerProps(String bootstrap) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "120000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "60000");
        return p;
    }

    static Properties consumerProps(String bootstrap, String group) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "60000");
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "60000");
        if (group != null) p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        return p;
    }

    static List<TopicPartition> partitions(KafkaConsumer<?, ?> consumer, String topic) {
        List<TopicPartition> out = new ArrayList<>();
        for (PartitionInfo info : consumer.partitionsFor(topic, Duration.ofSeconds(60))) {
            out.add(new TopicPartition(topic, info.partition()));
        }
        out.sort((a, b) -> Integer.compare(a.partition(), b.partition()));
        return out;
    }

    /** Every record of a topic from its beginning to its end offsets (the LSO for read_committed). */
    static List<ConsumerRecord<byte[], byte[]>> readAll(String bootstrap, String topic, String isolation) {
        Properties p = consumerProps(bootstrap, null);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            List<TopicPartition> tps = partitions(consumer, topic);
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            Map<TopicPartition, Long> end = consumer.endOffsets(tps);
            List<ConsumerRecord<byte[], byte[]>> out = new ArrayList<>();
            long deadline = System.currentTimeMillis() + DEADLINE_MS;
            while (!reached(consumer, end)) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("did not reach the end offsets " + end + " of " + topic);
                }
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) out.add(r);
            }
            return out;
        }
    }

    static boolean reached(KafkaConsumer<?, ?> consumer, Map<TopicPartition, Long> end) {
        for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
            if (consumer.position(e.getKey()) < e.getValue()) return false;
        }
        return true;
    }

    static Map<String, Object> record(ConsumerRecord<byte[], byte[]> r) {
        List<Object> headers = new ArrayList<>();
        for (Header h : r.headers()) headers.add(new Object[] {h.key(), h.value()});
        return Json.obj(
                "topic", r.topic(),
                "partition", r.partition(),
                "offset", r.offset(),
                "timestamp", r.timestamp(),
                "timestamp_type", r.timestampType().id,
                "key", r.key(),
                "value", r.value(),
                "headers", headers);
    }

    static List<Object> records(Collection<ConsumerRecord<byte[], byte[]>> rs) {
        List<Object> out = new ArrayList<>();
        for (ConsumerRecord<byte[], byte[]> r : rs) out.add(record(r));
        return out;
    }

    static Map<String, Object> offsets(Map<TopicPartition, ? extends Object> byPartition) {
        Map<String, Object> out = new java.util.TreeMap<>();
        for (Map.Entry<TopicPartition, ? extends Object> e : byPartition.entrySet()) {
            out.put(e.getKey().topic() + ":" + e.getKey().partition(), e.getValue());
        }
        return out;
    }

    static Map<String, String> argMap(String[] args) {
        Map<String, String> out = new HashMap<>();
        for (String a : args) {
            int eq = a.indexOf('=');
            if (!a.startsWith("--") || eq < 0) throw new IllegalArgumentException("expected --name=value, got " + a);
            out.put(a.substring(2, eq), a.substring(eq + 1));
        }
        return out;
    }
}
