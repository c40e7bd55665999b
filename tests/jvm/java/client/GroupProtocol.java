import java.time.Duration;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.KafkaConsumer;

/**
 * A consumer that asks for KIP-848's consumer group protocol (group.protocol=consumer), which
 * rayqueue does not serve: it must fail with Kafka's own error for a cluster without it, not
 * hang. Prints the error's class and message ("failed"), or "joined" if it got an assignment.
 *
 * Args: --bootstrap= --topic= --group=
 */
public final class GroupProtocol {
    public static void main(String[] argv) {
        var args = Common.argMap(argv);
        Properties p = Common.consumerProps(args.get("bootstrap"), args.get("group"));
        p.put("group.protocol", "consumer");
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            consumer.subscribe(List.of(args.get("topic")));
            long deadline = System.currentTimeMillis() + 30_000;
            while (System.currentTimeMillis() < deadline) {
                consumer.poll(Duration.ofMillis(200));
                if (!consumer.assignment().isEmpty()) {
                    Json.emit("joined", "partitions", consumer.assignment().size());
                    return;
                }
            }
            Json.emit("timed_out");
        } catch (Exception e) {
            Json.emit("failed", "error", e.getClass().getSimpleName(), "message", String.valueOf(e.getMessage()));
        }
    }
}
