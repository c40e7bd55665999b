import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;

/**
 * Kafka's Admin client, one call after another, each answer printed as one event for the test to
 * check against what rayqueue holds: create/describe/list/delete topics, describeConfigs and
 * incrementalAlterConfigs, listOffsets, deleteRecords, electLeaders, the consumer-group calls
 * (alter/list offsets, describe, list), describeCluster and listTransactions.
 *
 * Args: --bootstrap= --prefix= --group= --timestamp-base=
 */
public final class AdminOps {
    public static void main(String[] argv) throws Exception {
        var args = Common.argMap(argv);
        String bootstrap = args.get("bootstrap");
        String a = args.get("prefix") + "-a";
        String b = args.get("prefix") + "-b";
        String group = args.get("group");
        long base = Long.parseLong(args.get("timestamp-base"));
        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        // Generous: on a loaded shared machine creating a replicated topic can take a while, and
        // a request that times out is retried (a retried createTopics meets TopicExists).
        ap.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "180000");
        ap.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "150000");
        try (Admin admin = Admin.create(ap)) {
            topics(admin, a, b);
            configs(admin, a);
            offsets(admin, bootstrap, a, base);
            groups(admin, a, group);
            cluster(admin);
            Collection<TransactionListing> txns = admin.listTransactions().all().get();
            List<Object> listed = new ArrayList<>();
            for (TransactionListing t : txns) {
                listed.add(Json.obj("transactional_id", t.transactionalId(), "producer_id", t.producerId(),
                        "state", t.state().toString()));
            }
            Json.emit("transactions", "listed", listed);
            admin.deleteTopics(List.of(b)).all().get();
            Json.emit("deleted", "names", names(admin, args.get("prefix")));
        }
    }

    static void topics(Admin admin, String a, String b) throws Exception {
        CreateTopicsResult created = admin.createTopics(List.of(
                new NewTopic(a, 3, (short) 3).configs(Map.of("retention.ms", "86400000")),
                new NewTopic(b, 2, (short) 1)));
        created.all().get();
        for (String name : List.of(a, b)) {
            Config config = created.config(name).get();
            Json.emit("created", "name", name, "topic_id", created.topicId(name).get().toString(),
                    "partitions", created.numPartitions(name).get(),
                    "replication_factor", created.replicationFactor(name).get(),
                    "retention_ms", config.get("retention.ms").value(),
                    "retention_source", config.get("retention.ms").source().toString());
        }
        Json.emit("create_again", "error", error(() -> admin.createTopics(List.of(new NewTopic(a, 1, (short) 1)))
                .all().get()));
        Map<String, TopicDescription> described = admin.describeTopics(List.of(a, b)).allTopicNames().get();
        for (TopicDescription d : described.values()) {
            List<Object> parts = new ArrayList<>();
            for (TopicPartitionInfo p : d.partitions()) {
                parts.add(Json.obj("partition", p.partition(), "leader", p.leader().id(),
                        "replicas", ids(p.replicas()), "isr", ids(p.isr())));
            }
            Json.emit("described", "name", d.name(), "topic_id", d.topicId().toString(), "internal", d.isInternal(),
                    "partitions", parts);
        }
        Json.emit("describe_missing", "error", error(() -> admin.describeTopics(List.of(a + "-missing"))
                .allTopicNames().get()));
        Json.emit("listed", "names", names(admin, a.substring(0, a.length() - 2)));
    }

    static void configs(Admin admin, String a) throws Exception {
        ConfigResource topic = new ConfigResource(ConfigResource.Type.TOPIC, a);
        Json.emit("configs_before", "entries", entries(admin, topic));
        admin.incrementalAlterConfigs(Map.of(topic, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("max.message.bytes", "2000000"), AlterConfigOp.OpType.SET))))
                .all().get();
        Json.emit("configs_set", "entries", entries(admin, topic));
        admin.incrementalAlterConfigs(Map.of(topic, List.of(
                new AlterConfigOp(new ConfigEntry("max.message.bytes", ""), AlterConfigOp.OpType.DELETE))))
                .all().get();
        Json.emit("configs_deleted", "entries", entries(admin, topic));
        Json.emit("alter_invalid", "error", error(() -> admin.incrementalAlterConfigs(Map.of(topic, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "soon"), AlterConfigOp.OpType.SET)))).all().get()));
        Json.emit("broker_configs", "entries", entries(admin, new ConfigResource(ConfigResource.Type.BROKER, "0")));
    }

    static void offsets(Admin admin, String bootstrap, String a, long base) throws Exception {
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(Common.producerProps(bootstrap))) {
            for (int i = 0; i < 30; i++) {
                producer.send(new ProducerRecord<>(a, i % 3, base + i, null,
                        ("r" + i).getBytes(StandardCharsets.UTF_8)));
            }
            producer.flush();
        }
        List<TopicPartition> tps = List.of(new TopicPartition(a, 0), new TopicPartition(a, 1), new TopicPartition(a, 2));
        Map<String, OffsetSpec> specs = new TreeMap<>();
        specs.put("earliest", OffsetSpec.earliest());
        specs.put("latest", OffsetSpec.latest());
        specs.put("for_timestamp", OffsetSpec.forTimestamp(base + 15));
        specs.put("max_timestamp", OffsetSpec.maxTimestamp());
        for (Map.Entry<String, OffsetSpec> spec : specs.entrySet()) {
            Json.emit("list_offsets", "spec", spec.getKey(), "offsets", listOffsets(admin, tps, spec.getValue()));
        }
        var deleted = admin.deleteRecords(Map.of(tps.get(0), RecordsToDelete.beforeOffset(3))).lowWatermarks();
        Json.emit("delete_records", "low_watermark", deleted.get(tps.get(0)).get().lowWatermark(),
                "earliest", listOffsets(admin, tps, OffsetSpec.earliest()));
        Map<TopicPartition, Optional<Throwable>> elected =
                admin.electLeaders(ElectionType.PREFERRED, Set.of(tps.get(0), tps.get(1))).partitions().get();
        Map<TopicPartition, Object> outcome = new HashMap<>();
        for (var e : elected.entrySet()) outcome.put(e.getKey(), e.getValue().map(t -> t.getClass().getSimpleName())
                .orElse(null));
        Json.emit("elect_leaders", "partitions", Common.offsets(outcome));
    }

    static Map<String, Object> listOffsets(Admin admin, List<TopicPartition> tps, OffsetSpec spec) throws Exception {
        Map<TopicPartition, OffsetSpec> query = new HashMap<>();
        for (TopicPartition tp : tps) query.put(tp, spec);
        Map<TopicPartition, Object> out = new HashMap<>();
        for (Map.Entry<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> e
                : admin.listOffsets(query).all().get().entrySet()) {
            out.put(e.getKey(), List.of(e.getValue().offset(), e.getValue().timestamp()));
        }
        return Common.offsets(out);
    }

    static void groups(Admin admin, String a, String group) throws Exception {
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        offsets.put(new TopicPartition(a, 0), new OffsetAndMetadata(5, "five"));
        offsets.put(new TopicPartition(a, 1), new OffsetAndMetadata(2));
        admin.alterConsumerGroupOffsets(group, offsets).all().get();
        Json.emit("group_offsets", "offsets", groupOffsets(admin, group));
        admin.alterConsumerGroupOffsets(group, Map.of(new TopicPartition(a, 1), new OffsetAndMetadata(7))).all().get();
        Json.emit("group_offsets_altered", "offsets", groupOffsets(admin, group));
        ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
        Json.emit("group_described", "state", d.state().toString(), "members", d.members().size(),
                "coordinator", d.coordinator().id());
        Json.emit("groups_listed", "groups", groupIds(admin));
    }

    static Map<String, Object> groupOffsets(Admin admin, String group) throws Exception {
        Map<TopicPartition, Object> out = new HashMap<>();
        for (var e : admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get().entrySet()) {
            out.put(e.getKey(), List.of(e.getValue().offset(), e.getValue().metadata()));
        }
        return Common.offsets(out);
    }

    static Map<String, Object> groupIds(Admin admin) throws Exception {
        Map<String, Object> out = new TreeMap<>();
        for (ConsumerGroupListing g : admin.listConsumerGroups().all().get()) {
            out.put(g.groupId(), g.state().map(Object::toString).orElse(null));
        }
        return out;
    }

    static void cluster(Admin admin) throws Exception {
        DescribeClusterResult c = admin.describeCluster();
        List<Object> nodes = new ArrayList<>();
        for (Node n : c.nodes().get()) nodes.add(Json.obj("id", n.id(), "host", n.host(), "port", n.port()));
        Json.emit("cluster", "cluster_id", c.clusterId().get(), "controller", c.controller().get().id(), "nodes", nodes);
    }

    static List<Object> entries(Admin admin, ConfigResource resource) throws Exception {
        Config config = admin.describeConfigs(List.of(resource)).all().get().get(resource);
        List<Object> out = new ArrayList<>();
        for (ConfigEntry e : config.entries()) {
            out.add(Json.obj("name", e.name(), "value", e.value(), "source", e.source().toString(),
                    "read_only", e.isReadOnly()));
        }
        return out;
    }

    static List<String> names(Admin admin, String prefix) throws Exception {
        List<String> out = new ArrayList<>();
        for (String n : admin.listTopics().names().get()) if (n.startsWith(prefix)) out.add(n);
        out.sort(null);
        return out;
    }

    static List<Integer> ids(List<Node> nodes) {
        List<Integer> out = new ArrayList<>();
        for (Node n : nodes) out.add(n.id());
        return out;
    }

    interface Call {
        void run() throws Exception;
    }

    /** The Kafka exception a call fails with (its class's simple name), or null when it succeeds. */
    static String error(Call call) {
        try {
            call.run();
            return null;
        } catch (ExecutionException e) {
            return e.getCause().getClass().getSimpleName();
        } catch (Exception e) {
            return e.getClass().getSimpleName();
        }
    }
}
