// Command grpcload calls RunFunction the way Crossplane does: one grpc-go ClientConn
// to the function, many calls in flight on it, the request sent as the bytes it was
// serialized to (a pass-through codec, so the client's own cost is gRPC's, not
// protobuf's). The Python benchmark (benchmarks/run.py --client go) drives it; it
// shares the machine's cores with the server like a Python load generator would, but
// costs less per call, as Crossplane's Go client does.
//
//	grpcload -addr 127.0.0.1:9443 throughput -inflight 8 -seconds 5 req.bin
//	    prints {"calls": N, "seconds": S}
//	grpcload -addr ... latency -n 200 [-inflight-bg big.bin,runaway.bin] small.bin
//	    prints {"idle_ms": [...], "loaded_ms": [...]}: small-call latencies alone,
//	    then while each background request is kept in flight (one call at a time each)
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
)

const method = "/apiextensions.fn.proto.v1.FunctionRunnerService/RunFunction"

// rawCodec passes bytes through: the request is already serialized.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("rawCodec: want *[]byte, got %T", v)
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawCodec: want *[]byte, got %T", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "modelplane-raw" }

func init() { encoding.RegisterCodec(rawCodec{}) }

func call(ctx context.Context, cc *grpc.ClientConn, req []byte, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rsp []byte
	return cc.Invoke(ctx, method, &req, &rsp, grpc.ForceCodec(rawCodec{}))
}

func read(path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		fail(err)
	}
	return b
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "grpcload:", err)
	os.Exit(1)
}

func throughput(cc *grpc.ClientConn, args []string) {
	fs := flag.NewFlagSet("throughput", flag.ExitOnError)
	inflight := fs.Int("inflight", 8, "calls kept in flight")
	seconds := fs.Float64("seconds", 5, "how long")
	warm := fs.Float64("warm", 1, "seconds of calls before counting")
	_ = fs.Parse(args)
	req := read(fs.Arg(0))
	run := func(d time.Duration) (int64, time.Duration) {
		var n atomic.Int64
		stop := time.Now().Add(d)
		start := time.Now()
		var wg sync.WaitGroup
		for i := 0; i < *inflight; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(stop) {
					if err := call(context.Background(), cc, req, 120*time.Second); err != nil {
						fail(err)
					}
					n.Add(1)
				}
			}()
		}
		wg.Wait()
		return n.Load(), time.Since(start)
	}
	run(time.Duration(*warm * float64(time.Second)))
	n, el := run(time.Duration(*seconds * float64(time.Second)))
	out, _ := json.Marshal(map[string]any{"calls": n, "seconds": el.Seconds()})
	fmt.Println(string(out))
}

func latency(cc *grpc.ClientConn, args []string) {
	fs := flag.NewFlagSet("latency", flag.ExitOnError)
	n := fs.Int("n", 200, "small calls, idle and loaded")
	bg := fs.String("bg", "", "comma-separated request files kept in flight meanwhile")
	settle := fs.Float64("settle", 0.5, "seconds between starting the background and measuring")
	_ = fs.Parse(args)
	small := read(fs.Arg(0))
	measure := func() []float64 {
		if err := call(context.Background(), cc, small, 60*time.Second); err != nil { // warm up
			fail(err)
		}
		ms := make([]float64, 0, *n)
		for i := 0; i < *n; i++ {
			t := time.Now()
			if err := call(context.Background(), cc, small, 120*time.Second); err != nil {
				fail(err)
			}
			ms = append(ms, float64(time.Since(t).Microseconds())/1e3)
		}
		return ms
	}
	idle := measure()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, path := range strings.Split(*bg, ",") {
		if path == "" {
			continue
		}
		req := read(path)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				_ = call(ctx, cc, req, 120*time.Second) // fatal results are answers too
			}
		}()
	}
	time.Sleep(time.Duration(*settle * float64(time.Second)))
	loaded := measure()
	cancel()
	wg.Wait()
	out, _ := json.Marshal(map[string]any{"idle_ms": idle, "loaded_ms": loaded})
	fmt.Println(string(out))
}

func main() {
	addr := flag.String("addr", "127.0.0.1:9443", "host:port of the function (plaintext)")
	flag.Parse()
	if flag.NArg() < 2 {
		fail(fmt.Errorf("usage: grpcload -addr host:port throughput|latency [flags] request.bin"))
	}
	// One ClientConn, as Crossplane keeps per function; calls are multiplexed on it.
	cc, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fail(err)
	}
	defer cc.Close()
	switch flag.Arg(0) {
	case "throughput":
		throughput(cc, flag.Args()[1:])
	case "latency":
		latency(cc, flag.Args()[1:])
	default:
		fail(fmt.Errorf("unknown mode %q", flag.Arg(0)))
	}
}
