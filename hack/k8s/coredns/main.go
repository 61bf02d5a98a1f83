// Command coredns is CoreDNS (github.com/coredns/coredns, the version kubeadm of the pinned Kubernetes release
// deploys) with only the plugins the devcluster's cluster DNS uses, registered in CoreDNS's own order. This is
// CoreDNS's documented way to build a custom set of plugins (coremain.Run with the plugins imported); leaving the
// cloud plugins out (route53, azure, clouddns, etcd, nomad, ...) keeps the build small. See hack/build-node.sh.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

// plugins the Corefile may use; the order they run in is CoreDNS's (dnsserver.Directives)
var enabled = map[string]bool{
	"bind": true, "ready": true, "health": true, "errors": true, "log": true,
	"loadbalance": true, "cache": true, "kubernetes": true, "forward": true,
}

func main() {
	var directives []string
	for _, name := range dnsserver.Directives {
		if enabled[name] {
			directives = append(directives, name)
		}
	}
	dnsserver.Directives = directives
	coremain.Run()
}
