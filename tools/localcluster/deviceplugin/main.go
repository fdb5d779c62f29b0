// fake-device-plugin advertises fake GPUs and RDMA devices to one kubelet through the device-plugin API,
// the path real GPU and RDMA plugins take: the scheduler and the kubelet's admission then count them as
// they would count real ones, and a container that gets some sees their IDs in an environment variable.
//
//	fake-device-plugin --dir DIR --config FILE
//
// DIR is the kubelet's device-plugin folder (it holds kubelet.sock). FILE is JSON, re-read every second so
// a test can make a node unhealthy without restarting anything:
//
//	[{"resource": "nvidia.com/gpu", "count": 8, "env": "NVIDIA_VISIBLE_DEVICES", "unhealthy": 0}, ...]
//
// "visible": N (optional) makes Allocate list only the first N of the device IDs it allocated to a
// container, as a node whose driver lost a GPU would: the kubelet counts them allocated, the container
// sees fewer. That is what the operator's node health check must catch.
//
// When the kubelet restarts (a new kubelet.sock), every resource registers again.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type resourceConfig struct {
	Resource  string `json:"resource"`
	Count     int    `json:"count"`
	Env       string `json:"env"`
	Unhealthy int    `json:"unhealthy"`
	Visible   *int   `json:"visible,omitempty"`
}

// plugin serves one resource on its own socket.
type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	mu       sync.Mutex
	cfg      resourceConfig
	changed  chan struct{}
	endpoint string
	server   *grpc.Server
}

func (p *plugin) devices() []*pluginapi.Device {
	p.mu.Lock()
	defer p.mu.Unlock()
	prefix := strings.NewReplacer("/", "-", ".", "-").Replace(p.cfg.Resource)
	out := make([]*pluginapi.Device, 0, p.cfg.Count)
	for i := 0; i < p.cfg.Count; i++ {
		health := pluginapi.Healthy
		if i >= p.cfg.Count-p.cfg.Unhealthy {
			health = pluginapi.Unhealthy
		}
		out = append(out, &pluginapi.Device{ID: fmt.Sprintf("%s-%d", prefix, i), Health: health})
	}
	return out
}

func (p *plugin) update(cfg resourceConfig) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if reflect.DeepEqual(p.cfg, cfg) {
		return
	}
	p.cfg = cfg
	// Wake every ListAndWatch stream: they wait on the old channel.
	old := p.changed
	p.changed = make(chan struct{})
	close(old)
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	for {
		p.mu.Lock()
		changed := p.changed
		p.mu.Unlock()
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices()}); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return nil
		}
	}
}

func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	p.mu.Lock()
	env, visible := p.cfg.Env, p.cfg.Visible
	p.mu.Unlock()
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		envs := map[string]string{}
		ids := c.DevicesIds
		if visible != nil && *visible >= 0 && *visible < len(ids) {
			ids = ids[:*visible]
		}
		if env != "" {
			envs[env] = strings.Join(ids, ",")
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{Envs: envs})
	}
	return resp, nil
}

// serve (re)starts the plugin's gRPC server on a fresh socket. A starting kubelet deletes every socket in
// its device-plugin folder but its own, so this runs again whenever the kubelet restarts.
func (p *plugin) serve(dir string) error {
	if p.server != nil {
		p.server.Stop()
	}
	path := filepath.Join(dir, p.endpoint)
	_ = os.Remove(path)
	lis, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	p.server = srv
	go func() {
		if err := srv.Serve(lis); err != nil {
			log.Fatal(err)
		}
	}()
	return nil
}

func register(dir string, p *plugin) error {
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "kubelet.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: p.endpoint, ResourceName: p.cfg.Resource,
		Options: &pluginapi.DevicePluginOptions{},
	})
	return err
}

func readConfig(path string) ([]resourceConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cfgs []resourceConfig
	return cfgs, json.Unmarshal(data, &cfgs)
}

// kubeletSocketID changes whenever the kubelet recreates its socket (a restart).
func kubeletSocketID(dir string) uint64 {
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dir, "kubelet.sock"), &st); err != nil {
		return 0
	}
	return st.Ino ^ uint64(st.Ctim.Nano())
}

func main() {
	dir := flag.String("dir", pluginapi.DevicePluginPath, "the kubelet's device-plugin folder")
	configPath := flag.String("config", "", "JSON list of resources")
	flag.Parse()
	cfgs, err := readConfig(*configPath)
	if err != nil {
		log.Fatalf("config: %v", err)
	}
	plugins := map[string]*plugin{}
	for _, c := range cfgs {
		plugins[c.Resource] = &plugin{cfg: c, changed: make(chan struct{}),
			endpoint: "fake-" + strings.NewReplacer("/", "-", ".", "-").Replace(c.Resource) + ".sock"}
	}
	var registeredFor uint64
	for {
		if id := kubeletSocketID(*dir); id != 0 && id != registeredFor {
			ok := true
			for _, p := range plugins {
				if err := p.serve(*dir); err != nil {
					log.Fatalf("serve %s: %v", p.cfg.Resource, err)
				}
				if err := register(*dir, p); err != nil {
					log.Printf("register %s: %v", p.cfg.Resource, err)
					ok = false
				}
			}
			if ok {
				registeredFor = id
				log.Printf("registered %d resources with the kubelet", len(plugins))
			}
		}
		if cfgs, err := readConfig(*configPath); err == nil {
			for _, c := range cfgs {
				if p, found := plugins[c.Resource]; found {
					p.update(c)
				}
			}
		}
		time.Sleep(time.Second)
	}
}
