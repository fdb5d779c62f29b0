// distribution's registry server with only the storage driver the local cluster uses (filesystem, in the
// cluster's folder). Its own cmd/registry also links the Azure, GCS and S3 drivers with their SDKs, the
// CloudFront middleware and the pull-through proxy: more than twice the binary and the compile. The server
// itself (the HTTP API, storage layout, configuration file, `serve` and `garbage-collect`) is the same code.
package main

import (
	"os"

	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
)

// registry.RootCmd parses the command line (`serve <config.yml>`) itself.
func main() {
	if err := registry.RootCmd.Execute(); err != nil {
		os.Exit(1)
	}
}
