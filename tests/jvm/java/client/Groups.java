import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.consumer.CommitFailedException;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RebalanceInProgressException;

/**
 * A consumer group of three (classic protocol) with the assignor given, over a topic that other
 * clients filled: every record read once, offsets committed after each poll; the stable
 * assignment and describeConsumerGroups; one member leaves and the two others take its partitions
 * (with the cooperative assignor without giving up their own); records produced then are read
 * once too. Then, outside the group: committed offsets, seekToBeginning, offsetsForTimes.
 *
 * Args: --bootstrap= --topic= --group= --assignor=range|cooperative-sticky --expected=N --extra=M
 *       --for-time=T
 */
public final class Groups {
    static final List<Object> consumed = Collections.synchronizedList(new ArrayList<>());

    static final class Member implements Runnable, ConsumerRebalanceListener {
        final int index;
        final KafkaConsumer<byte[], byte[]> consumer;
        final String topic;
        final Set<TopicPartition> assigned = Collections.synchronizedSet(new HashSet<>());
        final List<Object> events = Collections.synchronizedList(new ArrayList<>());
        volatile boolean stop;
        volatile Throwable failure;

        Member(int index, Properties props, String topic) {
            this.index = index;
            this.consumer = new KafkaConsumer<>(props);
            this.topic = topic;
        }

        @Override
        public void run() {
            try {
                consumer.subscribe(List.of(topic), this);
                boolean uncommitted = false;
                while (!stop) {
                    ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(100));
                    for (ConsumerRecord<byte[], byte[]> r : records) {
                        consumed.add(Json.obj("member", index, "partition", r.partition(), "offset", r.offset(),
                                "value", r.value()));
                    }
                    if (!records.isEmpty() || uncommitted) {
                        try {
                            consumer.commitSync();
                            uncommitted = false;
                        } catch (RebalanceInProgressException e) {
                            // A rebalance began (the group changed, or a slow member rejoined):
                            // the client's answer is to finish it with poll() and commit again;
                            // what is revoked meanwhile is committed in onPartitionsRevoked.
                            uncommitted = true;
                        }
                    }
                }
            } catch (Throwable t) {
                failure = t;
            } finally {
                consumer.close(); // leaves the group
            }
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            assigned.addAll(partitions);
            events.add(Json.obj("kind", "assigned", "partitions", names(partitions)));
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            // As Kafka's documentation has it: commit what was read of the partitions given up,
            // so their next owner starts after it (every record read once).
            Map<TopicPartition, OffsetAndMetadata> positions = new HashMap<>();
            for (TopicPartition tp : partitions) positions.put(tp, new OffsetAndMetadata(consumer.position(tp)));
            try {
                if (!positions.isEmpty()) consumer.commitSync(positions);
            } catch (RebalanceInProgressException | CommitFailedException e) {
                // Their next owner reads them again from the last commit: shown in the events.
                events.add(Json.obj("kind", "revoked_uncommitted", "error", e.getClass().getSimpleName()));
            }
            assigned.removeAll(partitions);
            events.add(Json.obj("kind", "revoked", "partitions", names(partitions)));
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> partitions) {
            assigned.removeAll(partitions);
            events.add(Json.obj("kind", "lost", "partitions", names(partitions)));
        }

        List<Integer> owned() {
            synchronized (assigned) {
                List<Integer> out = new ArrayList<>();
                for (TopicPartition tp : assigned) out.add(tp.partition());
                Collections.sort(out);
                return out;
            }
        }
    }

    static List<Integer> names(Collection<TopicPartition> tps) {
        List<Integer> out = new ArrayList<>();
        for (TopicPartition tp : tps) out.add(tp.partition());
        Collections.sort(out);
        return out;
    }

    /** Wait until the members' assignments split all partitions between them, each owning some. */
    static void awaitSplit(List<Member> members, int partitions, int atLeastConsumed, String what) throws Exception {
        long deadline = System.currentTimeMillis() + Common.DEADLINE_MS;
        while (true) {
            Set<Integer> union = new TreeSet<>();
            int total = 0;
            boolean eachOwns = true;
            for (Member m : members) {
                if (m.failure != null) throw new RuntimeException("member " + m.index + " failed", m.failure);
                List<Integer> owned = m.owned();
                eachOwns &= !owned.isEmpty();
                union.addAll(owned);
                total += owned.size();
            }
            if (eachOwns && union.size() == partitions && total == partitions && consumed.size() >= atLeastConsumed) {
                return;
            }
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException(what + ": no split assignment in time, consumed " + consumed.size());
            }
            Thread.sleep(50);
        }
    }

    static Map<String, Object> assignments(List<Member> members) {
        Map<String, Object> out = new java.util.TreeMap<>();
        for (Member m : members) out.put(String.valueOf(m.index), m.owned());
        return out;
    }

    public static void main(String[] argv) throws Exception {
        var args = Common.argMap(argv);
        String bootstrap = args.get("bootstrap");
        String topic = args.get("topic");
        String group = args.get("group");
        String assignor = args.get("assignor");
        int expected = Integer.parseInt(args.get("expected"));
        int extra = Integer.parseInt(args.get("extra"));
        long forTime = Long.parseLong(args.get("for-time"));

        Properties props = Common.consumerProps(bootstrap, group);
        props.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG,
                "range".equals(assignor) ? RangeAssignor.class.getName() : CooperativeStickyAssignor.class.getName());
        props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "30000");
        props.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
        int partitions;
        try (KafkaConsumer<byte[], byte[]> probe = new KafkaConsumer<>(Common.consumerProps(bootstrap, null))) {
            partitions = Common.partitions(probe, topic).size();
        }

        List<Member> members = new ArrayList<>();
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            Properties p = new Properties();
            p.putAll(props);
            p.put(ConsumerConfig.CLIENT_ID_CONFIG, group + "-member-" + i);
            Member m = new Member(i, p, topic);
            members.add(m);
            Thread t = new Thread(m, "member-" + i);
            t.setDaemon(true); // a failure in main ends the JVM at once, not at the test's timeout
            threads.add(t);
            t.start();
        }
        awaitSplit(members, partitions, expected, "three members");
        Json.emit("stable", "assignments", assignments(members), "consumed", consumed.size());

        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(ap)) {
            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
            List<Object> described = new ArrayList<>();
            for (MemberDescription md : d.members()) {
                described.add(Json.obj("client_id", md.clientId(), "consumer_id", md.consumerId(), "host", md.host(),
                        "partitions", names(md.assignment().topicPartitions())));
            }
            Json.emit("described", "state", d.state().toString(), "assignor", d.partitionAssignor(),
                    "simple", d.isSimpleConsumerGroup(), "coordinator", d.coordinator().id(), "members", described);
        }

        // One member leaves; the other two must end up owning every partition.
        Member leaver = members.get(2);
        for (Member m : members) m.events.clear();
        leaver.stop = true;
        threads.get(2).join(Common.DEADLINE_MS);
        List<Member> survivors = members.subList(0, 2);
        awaitSplit(survivors, partitions, expected, "two members");
        Map<String, Object> events = new java.util.TreeMap<>();
        for (Member m : survivors) events.put(String.valueOf(m.index), new ArrayList<>(m.events));
        Json.emit("after_leave", "assignments", assignments(survivors), "events", events);

        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(Common.producerProps(bootstrap))) {
            for (int i = 0; i < extra; i++) {
                byte[] key = ("extra-key-" + i).getBytes(StandardCharsets.UTF_8);
                producer.send(new ProducerRecord<>(topic, key, ("extra-" + i).getBytes(StandardCharsets.UTF_8)));
            }
            producer.flush();
        }
        long deadline = System.currentTimeMillis() + Common.DEADLINE_MS;
        while (consumed.size() < expected + extra && System.currentTimeMillis() < deadline) Thread.sleep(50);
        for (Member m : survivors) m.stop = true;
        for (Thread t : threads) t.join(Common.DEADLINE_MS);
        for (Member m : members) {
            if (m.failure != null) throw new RuntimeException("member " + m.index + " failed", m.failure);
        }
        Json.emit("consumed", "records", new ArrayList<>(consumed));

        // Outside the group (assign, no subscribe): its committed offsets, and positions.
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(Common.consumerProps(bootstrap, group))) {
            List<TopicPartition> tps = Common.partitions(c, topic);
            Map<TopicPartition, Object> committed = new HashMap<>();
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : c.committed(new HashSet<>(tps)).entrySet()) {
                committed.put(e.getKey(), e.getValue() == null ? null : e.getValue().offset());
            }
            Json.emit("committed", "offsets", Common.offsets(committed));
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Object> positions = new HashMap<>();
            for (TopicPartition tp : tps) positions.put(tp, c.position(tp));
            Json.emit("beginning", "offsets", Common.offsets(positions));
            Json.emit("end", "offsets", Common.offsets(c.endOffsets(tps)));
            Map<TopicPartition, Long> query = new HashMap<>();
            for (TopicPartition tp : tps) query.put(tp, forTime);
            Map<TopicPartition, Object> found = new HashMap<>();
            for (Map.Entry<TopicPartition, OffsetAndTimestamp> e : c.offsetsForTimes(query).entrySet()) {
                found.put(e.getKey(), e.getValue() == null ? null
                        : List.of(e.getValue().offset(), e.getValue().timestamp()));
            }
            Json.emit("for_times", "offsets", Common.offsets(found));
        }
    }
}
