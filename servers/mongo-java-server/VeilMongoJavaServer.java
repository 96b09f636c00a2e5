// Veil's launcher for mongo-java-server (de.bwaldvogel) over its H2 MVStore backend:
// a second MongoDB-wire server beside FerretDB, for Veil's tests and benchmarks.
// Usage: java -cp 'classes:lib/*' VeilMongoJavaServer MVSTORE_FILE PORT
// Started and stopped by veil_dev.servers.mongojava; it prints one ready line once it listens.

import de.bwaldvogel.mongo.MongoServer;
import de.bwaldvogel.mongo.MongoVersion;
import de.bwaldvogel.mongo.backend.h2.H2Backend;
import java.util.List;

public final class VeilMongoJavaServer {
    private VeilMongoJavaServer() {}

    // mongo-java-server 1.47 announces MongoDB 5.0.0 but wire version 8 (MongoDB 4.2's; 5.0's
    // is 13), and pymongo 4 refuses servers below wire version 9. The commands Veil sends are
    // MongoDB 4.4's, so the server announces 4.4.0 with 4.4's wire version, 9.
    private static final MongoVersion REPORTED_VERSION = new MongoVersion() {
        @Override
        public List<Integer> getVersionArray() {
            return List.of(4, 4, 0);
        }

        @Override
        public int getWireVersion() {
            return 9;
        }
    };

    public static void main(String[] args) throws InterruptedException {
        if (args.length != 2) {
            System.err.println("usage: VeilMongoJavaServer MVSTORE_FILE PORT");
            System.exit(2);
        }
        H2Backend backend = new H2Backend(args[0]);
        backend.version(REPORTED_VERSION);
        MongoServer server = new MongoServer(backend);
        server.bind("127.0.0.1", Integer.parseInt(args[1]));
        // SIGTERM runs this hook: shutdown() closes the clients and then the backend, whose
        // MVStore close commits what its background auto-commit has not written yet.
        Runtime.getRuntime().addShutdownHook(new Thread(server::shutdown, "veil-shutdown"));
        System.out.println("veil-mongo-java-server ready on 127.0.0.1:" + args[1]);
        System.out.flush();
        Thread.currentThread().join();
    }
}
