// CoreDNS with only the plugins the local cluster's Corefile uses (hostservices.coredns_args: bind, errors,
// kubernetes). CoreDNS's own main links every plugin it has, cloud DNS providers and their SDKs included,
// which was most of its build time on a cold machine; a plugin that is not imported here is simply not
// registered, and the Corefile must not name one.
package main

import (
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
)

// coremain.Run parses the command line (-conf) itself.
func main() {
	coremain.Run()
}
