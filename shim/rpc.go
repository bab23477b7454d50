package main

// A client of sandboxd's JSON-RPC 2.0 API (docs/API.md): one Unix socket
// connection, one JSON message per line, requests in flight at once,
// answers matched by id, command.output/command.exit notifications handed
// to the process that owns the cmdId.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// defaultSocket is sandboxd's default socket (docs/API.md); SANDBOXD_SOCKET
// in containerd's environment (the shim inherits it) overrides it.
const defaultSocket = "/run/sandboxd/sandboxd.sock"

func socketPath() string {
	if p := os.Getenv("SANDBOXD_SOCKET"); p != "" {
		return p
	}
	return defaultSocket
}

// rpcError is an error answer of sandboxd: code, message and data.field /
// data.reason when present.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    struct {
		Field  string `json:"field"`
		Reason string `json:"reason"`
	} `json:"data"`
}

func (e *rpcError) Error() string {
	if e.Data.Field != "" && !startsWith(e.Message, e.Data.Field) {
		return e.Data.Field + ": " + e.Message
	}
	return e.Message
}

func startsWith(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }

// isReason says whether err is a sandboxd error with data.reason r.
func isReason(err error, r string) bool {
	var re *rpcError
	return errors.As(err, &re) && re.Data.Reason == r
}

type rpcMsg struct {
	ID     *json.RawMessage `json:"id"`
	Method string           `json:"method"`
	Params json.RawMessage  `json:"params"`
	Result json.RawMessage  `json:"result"`
	Error  *rpcError        `json:"error"`
}

// notifyFunc receives a notification's method and params; it runs on the
// reader goroutine, in arrival order (blocking it is how the daemon's flow
// control reaches the FIFO readers, docs/API.md "Framing").
type notifyFunc func(method string, params json.RawMessage)

type rpcClient struct {
	path    string
	conn    net.Conn
	wmu     sync.Mutex
	mu      sync.Mutex
	next    int64
	pending map[int64]chan rpcMsg
	closed  error // why calls fail now: the connection is lost, or closed
	notify  notifyFunc
	done    chan struct{} // closed when the current connection is lost
	// Reconnecting clients (dialRPCReconnecting) dial the same socket
	// again after a loss; up is closed when a new connection is up.
	redial      bool
	onReconnect func()
	up          chan struct{}
	shut        bool
	shutCh      chan struct{} // closed by close()
}

// dialRPC connects to sandboxd's socket; notify gets every notification.
// A lost connection stays lost: every later call fails.
func dialRPC(path string, notify notifyFunc) (*rpcClient, error) {
	conn, err := net.Dial("unix", path)
	if err != nil {
		return nil, fmt.Errorf("sandboxd socket %s: %w (is sandboxd running? SANDBOXD_SOCKET names another socket)", path, err)
	}
	c := &rpcClient{path: path, conn: conn, pending: map[int64]chan rpcMsg{}, notify: notify,
		done: make(chan struct{}), up: make(chan struct{}), shutCh: make(chan struct{})}
	close(c.up)
	go c.readLoop(conn, c.done)
	return c, nil
}

// dialRPCReconnecting is dialRPC for a client that outlives sandboxd
// restarts (docs/API.md "Daemon restarts (live restore)"): when the
// connection is lost, the requests in flight fail, and the client dials
// path again with backoff (50 ms doubling to 1 s) until close(); calls made
// meanwhile wait for the new connection (up to reconnectWait). onReconnect
// runs (on its own goroutine) after each new connection is up.
func dialRPCReconnecting(path string, notify notifyFunc, onReconnect func()) (*rpcClient, error) {
	c, err := dialRPC(path, notify)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.redial, c.onReconnect = true, onReconnect
	c.mu.Unlock()
	return c, nil
}

// reconnectWait bounds how long a call waits for sandboxd to come back.
const reconnectWait = 30 * time.Second

func (c *rpcClient) reconnect() {
	delay := 50 * time.Millisecond
	for {
		select {
		case <-c.shutCh:
			return
		case <-time.After(delay):
		}
		if delay *= 2; delay > time.Second {
			delay = time.Second
		}
		conn, err := net.Dial("unix", c.path)
		if err != nil {
			continue
		}
		c.mu.Lock()
		if c.shut {
			c.mu.Unlock()
			conn.Close()
			return
		}
		c.conn, c.closed, c.done = conn, nil, make(chan struct{})
		done, up := c.done, c.up
		c.mu.Unlock()
		close(up)
		go c.readLoop(conn, done)
		if c.onReconnect != nil {
			go c.onReconnect()
		}
		return
	}
}

// lost is closed when the current connection is lost.
func (c *rpcClient) lost() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done
}

func (c *rpcClient) readLoop(conn net.Conn, done chan struct{}) {
	r := bufio.NewReaderSize(conn, 1<<20)
	var err error
	for {
		var line []byte
		line, err = r.ReadBytes('\n')
		if err != nil {
			break
		}
		var m rpcMsg
		if json.Unmarshal(line, &m) != nil {
			continue
		}
		if m.ID == nil || string(*m.ID) == "null" {
			if m.Method != "" && c.notify != nil {
				c.notify(m.Method, m.Params)
			}
			continue
		}
		var id int64
		if json.Unmarshal(*m.ID, &id) != nil {
			continue
		}
		c.mu.Lock()
		ch := c.pending[id]
		delete(c.pending, id)
		c.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	}
	conn.Close()
	c.mu.Lock()
	if c.shut {
		c.closed = errors.New("connection to sandboxd closed")
	} else {
		c.closed = fmt.Errorf("connection to sandboxd lost: %v", err)
	}
	for id, ch := range c.pending {
		close(ch)
		delete(c.pending, id)
	}
	again := c.redial && !c.shut
	if again {
		c.up = make(chan struct{})
	}
	c.mu.Unlock()
	close(done)
	if again {
		go c.reconnect()
	}
}

// call sends method(params) and waits for its answer, decoded into out
// (when not nil). An error answer is returned as *rpcError.
func (c *rpcClient) call(method string, params interface{}, out interface{}) error {
	c.mu.Lock()
	if c.closed != nil && c.redial && !c.shut {
		up := c.up
		c.mu.Unlock()
		select {
		case <-up:
		case <-c.shutCh:
		case <-time.After(reconnectWait):
		}
		c.mu.Lock()
	}
	if c.closed != nil {
		err := c.closed
		c.mu.Unlock()
		return fmt.Errorf("%s: %w", method, err)
	}
	conn := c.conn
	c.next++
	id := c.next
	ch := make(chan rpcMsg, 1)
	c.pending[id] = ch
	c.mu.Unlock()
	if params == nil {
		params = map[string]interface{}{}
	}
	req, err := json.Marshal(map[string]interface{}{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err != nil {
		return err
	}
	req = append(req, '\n')
	c.wmu.Lock()
	_, err = conn.Write(req)
	c.wmu.Unlock()
	if err != nil {
		return fmt.Errorf("%s: writing to sandboxd: %w", method, err)
	}
	m, ok := <-ch
	if !ok {
		c.mu.Lock()
		defer c.mu.Unlock()
		return fmt.Errorf("%s: %v", method, c.closed)
	}
	if m.Error != nil {
		return m.Error
	}
	if out != nil {
		return json.Unmarshal(m.Result, out)
	}
	return nil
}

// close ends the client: no reconnection; calls fail from now on.
func (c *rpcClient) close() {
	c.mu.Lock()
	if !c.shut {
		c.shut = true
		close(c.shutCh)
	}
	conn := c.conn
	c.mu.Unlock()
	conn.Close()
}
