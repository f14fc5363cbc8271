// Command leasehold-leaderelect is one candidate of client-go's leader
// election (k8s.io/client-go/tools/leaderelection) on a coordination.k8s.io
// Lease: the baseline the hand-over benchmark (bench/handover.py) compares
// leasehold's lease hand-over with. It campaigns until it leads, prints
// "leading <unix-nanos>" when it does, holds the lease until it loses it,
// then exits 0.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file")
	namespace := flag.String("namespace", "default", "namespace of the Lease")
	name := flag.String("name", "bench-leader", "name of the Lease")
	id := flag.String("id", "", "this candidate's identity")
	lease := flag.Duration("lease-duration", 10*time.Second, "LeaseDuration")
	renew := flag.Duration("renew-deadline", 0, "RenewDeadline (default: 2/3 of lease-duration)")
	retry := flag.Duration("retry-period", 0, "RetryPeriod (default: 1/5 of lease-duration)")
	flag.Parse()
	if *renew == 0 {
		*renew = *lease * 2 / 3
	}
	if *retry == 0 {
		*retry = *lease / 5
	}
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	config.QPS, config.Burst = 50, 100
	clientset := kubernetes.NewForConfigOrDie(config)
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: *name, Namespace: *namespace},
		Client:     clientset.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: *id},
	}
	leaderelection.RunOrDie(context.Background(), leaderelection.LeaderElectionConfig{
		Lock:          lock,
		LeaseDuration: *lease,
		RenewDeadline: *renew,
		RetryPeriod:   *retry,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				fmt.Printf("leading %d\n", time.Now().UnixNano())
				<-ctx.Done()
			},
			OnStoppedLeading: func() {
				fmt.Printf("stopped %d\n", time.Now().UnixNano())
				os.Exit(0)
			},
		},
	})
}
