// kube-network-policies v0.8.0's controller (pkg/networkpolicy) with a client from a kubeconfig,
// for the clusters with real nodes: their nodes share one network namespace, so one instance,
// started on the host side of that namespace, judges every node's pods. Upstream's main reads
// the in-cluster config only and serves metrics on :9080; this one takes --kubeconfig and
// serves none unless asked.
//
// The controller feeds nfqueue through an nftables `queue` rule, which kernels without
// CONFIG_NFT_QUEUE refuse: its syncs then fail (logged, each burst of pod or policy events
// retried at most 5 times by its workqueue, so the log grows with the cluster's changes, not
// with time) while its nfqueue listener still works. The caller feeds the queue with an iptables
// NFQUEUE rule instead (webhook/devcluster/realnodes/netpol.py).
package main

import (
	"context"
	"flag"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/kube-network-policies/pkg/networkpolicy"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "the cluster's kubeconfig (required)")
	queueID := flag.Int("nfqueue-id", 100, "the nfqueue the packets to judge arrive on")
	// The name only decides which pods' events re-run the nftables sync (and, with
	// AdminNetworkPolicy, which is off here, node selectors): verdicts cover every pod.
	hostname := flag.String("hostname-override", "", "the node this instance stands for (default: the hostname)")
	metrics := flag.String("metrics-bind-address", "", "serve /metrics there, e.g. 127.0.0.1:9080 (default: off)")
	failOpen := flag.Bool("fail-open", false, "accept the queued packets while the controller is not running")
	klog.InitFlags(nil)
	flag.Parse()
	if *kubeconfig == "" {
		klog.Error("--kubeconfig is required")
		os.Exit(2)
	}
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		klog.ErrorS(err, "reading the kubeconfig", "path", *kubeconfig)
		os.Exit(1)
	}
	// As upstream: protobuf for the built-in types.
	config.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	config.ContentType = "application/vnd.kubernetes.protobuf"
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		klog.ErrorS(err, "creating the client")
		os.Exit(1)
	}
	if *metrics != "" {
		http.Handle("/metrics", promhttp.Handler())
		go func() { klog.ErrorS(http.ListenAndServe(*metrics, nil), "metrics server") }()
	}
	// SIGTERM too (upstream stops on SIGINT only): the cluster's processes are stopped by pid
	// with SIGTERM.
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	factory := informers.NewSharedInformerFactory(client, 0)
	cfg := networkpolicy.Config{
		QueueID:  *queueID,
		NodeName: *hostname,
		FailOpen: *failOpen,
		// NRI would ask the node's containerd for pod IPs; the API server's are enough here.
		NRIdisabled: true,
		// Its DNS workaround is more nftables rules (which fail here, see above).
		NetfilterBug1766Fix: false,
	}
	// No AdminNetworkPolicy clients or informers: those APIs are not installed.
	controller, err := networkpolicy.NewController(client,
		factory.Networking().V1().NetworkPolicies(), factory.Core().V1().Namespaces(),
		factory.Core().V1().Pods(), nil, nil, nil, nil, cfg)
	if err != nil {
		klog.ErrorS(err, "creating the network policy controller")
		os.Exit(1)
	}
	factory.Start(ctx.Done())
	// Run returns when ctx ends (after removing its nftables table) or when the nfqueue
	// cannot be opened.
	if err := controller.Run(ctx); err != nil {
		klog.ErrorS(err, "network policy controller")
		os.Exit(1)
	}
}
