import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.Future;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.header.internals.RecordHeader;

/**
 * Produce with acks=all and idempotence on, once per compression codec, records with binary keys
 * (some null), binary values (one null, some empty), headers (binary, null-valued, repeated keys)
 * and explicit timestamps; print each as sent with its metadata ("sent"). Then read the whole
 * topic from the beginning, records other clients wrote included, and print it ("read").
 *
 * Args: --bootstrap= --topic= --per-codec= --timestamp-base= --codecs=none,gzip,snappy,lz4,zstd
 */
public final class ProduceRead {
    public static void main(String[] argv) throws Exception {
        var args = Common.argMap(argv);
        String bootstrap = args.get("bootstrap");
        String topic = args.get("topic");
        int perCodec = Integer.parseInt(args.get("per-codec"));
        long base = Long.parseLong(args.get("timestamp-base"));
        String[] codecs = args.getOrDefault("codecs", "none,gzip,snappy,lz4,zstd").split(",");

        for (int c = 0; c < codecs.length; c++) {
            Properties p = Common.producerProps(bootstrap);
            p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codecs[c]);
            List<ProducerRecord<byte[], byte[]>> sent = new ArrayList<>();
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
                for (int i = 0; i < perCodec; i++) {
                    ProducerRecord<byte[], byte[]> r =
                            new ProducerRecord<>(topic, null, base + c * 1000L + i, key(c, i), value(codecs[c], i));
                    r.headers().add(new RecordHeader("codec", codecs[c].getBytes(StandardCharsets.UTF_8)));
                    r.headers().add(new RecordHeader("bin", new byte[] {0, 1, (byte) 0xfe, (byte) 0xff}));
                    if (i % 3 == 0) r.headers().add(new RecordHeader("nothing", (byte[]) null));
                    if (i % 4 == 0) {
                        r.headers().add(new RecordHeader("dup", "a".getBytes(StandardCharsets.UTF_8)));
                        r.headers().add(new RecordHeader("dup", "b".getBytes(StandardCharsets.UTF_8)));
                    }
                    sent.add(r);
                    futures.add(producer.send(r));
                }
                producer.flush();
                for (int i = 0; i < sent.size(); i++) {
                    RecordMetadata md = futures.get(i).get();
                    ProducerRecord<byte[], byte[]> r = sent.get(i);
                    List<Object> headers = new ArrayList<>();
                    r.headers().forEach(h -> headers.add(new Object[] {h.key(), h.value()}));
                    Json.emit("sent", "codec", codecs[c], "partition", md.partition(), "offset", md.offset(),
                            "timestamp", md.timestamp(), "key", r.key(), "value", r.value(), "headers", headers);
                }
            }
        }
        List<ConsumerRecord<byte[], byte[]>> all = Common.readAll(bootstrap, topic, "read_uncommitted");
        Json.emit("read", "records", Common.records(all));
    }

    static byte[] key(int c, int i) {
        if (i % 6 == 5) return null;
        byte[] tail = ("k" + (i % 4)).getBytes(StandardCharsets.UTF_8);
        byte[] k = new byte[5 + tail.length];
        k[0] = (byte) c;
        k[1] = (byte) i;
        k[2] = 0;
        k[3] = (byte) 0xff;
        k[4] = (byte) 0x80;
        System.arraycopy(tail, 0, k, 5, tail.length);
        return k;
    }

    static byte[] value(String codec, int i) {
        if (i == 7) return null;
        if (i % 13 == 12) return new byte[0];
        byte[] head = ("java-" + codec + "-" + i + "|").getBytes(StandardCharsets.UTF_8);
        byte[] v = new byte[head.length + 200];
        System.arraycopy(head, 0, v, 0, head.length);
        for (int j = 0; j < 200; j++) v[head.length + j] = (byte) ((j * (i + 1)) & 0xff);
        return v;
    }
}
