// Command veil-ferretdb runs FerretDB (MongoDB wire protocol over SQLite) on one
// loopback address and one data directory, for Veil's tests and benchmarks.
//
// FerretDB's own cmd/ferretdb panics at start when installed from the module
// (its generated build/version/version.txt is not part of the module), so Veil
// embeds the github.com/FerretDB/FerretDB/ferretdb package instead.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/FerretDB/FerretDB/ferretdb"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:27017", "TCP address to listen on")
	dir := flag.String("dir", "", "SQLite data directory (created if missing)")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "veil-ferretdb: -dir is required")
		os.Exit(2)
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		fmt.Fprintln(os.Stderr, "veil-ferretdb:", err)
		os.Exit(1)
	}
	server, err := ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{TCP: *listen},
		Handler:   "sqlite",
		SQLiteURL: "file:" + *dir + "/",
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "veil-ferretdb:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Println("veil-ferretdb: listening on", *listen)
	if err := server.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "veil-ferretdb:", err)
		os.Exit(1)
	}
}
