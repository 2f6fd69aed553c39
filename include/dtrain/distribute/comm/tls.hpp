#pragma once
/// \file
/// TLS 1.3 for the ring's data plane (`ring_tcp_options::tls`), keyed by the job token: no certificates.
/// Each ring connection's pre-shared key is HMAC-SHA256(token, "dtrain-tls-psk-v2" || client hello ||
/// server hello), so every connection has its own key and both ends are authenticated by it; the
/// cipher suite is TLS_AES_128_GCM_SHA256 (AES-NI where the CPU has it) with an ephemeral (EC)DHE
/// exchange, so recorded traffic stays secret even if the token leaks later. Frames then travel as TLS
/// records: nobody on the path can read gradients, and a modified, replayed or injected byte fails
/// the record's authentication (a comm_error naming the peer).
///
/// I/O stays non-blocking and never raises SIGPIPE: the socket BIO here calls send/recv with
/// MSG_DONTWAIT | MSG_NOSIGNAL, as the plain ring does.

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <system_error>

#include "dtrain/distribute/comm/communicator.hpp"
#include "dtrain/distribute/comm/handshake.hpp"

namespace dtrain::comm::detail {

inline constexpr char tls_label[] = "dtrain-tls-psk-v2";
inline constexpr char tls_identity[] = "dtrain";

/// The last OpenSSL error as text (and the queue cleared).
inline std::string tls_error_text() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    out += (out.empty() ? "" : "; ") + std::string(buf);
  }
  return out.empty() ? "TLS failure" : out;
}

/// A BIO over a socket that never blocks and never raises SIGPIPE.
inline BIO_METHOD* socket_bio_method() {
  static BIO_METHOD* const m = [] {
    BIO_METHOD* b = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "dtrain socket");
    BIO_meth_set_write(b, [](BIO* bio, const char* p, int n) -> int {
      BIO_clear_retry_flags(bio);
      const ssize_t w = ::send(int(reinterpret_cast<std::intptr_t>(BIO_get_data(bio))), p, std::size_t(n),
                               MSG_DONTWAIT | MSG_NOSIGNAL);
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_write(bio);
      return int(w);
    });
    BIO_meth_set_read(b, [](BIO* bio, char* p, int n) -> int {
      BIO_clear_retry_flags(bio);
      const ssize_t r = ::recv(int(reinterpret_cast<std::intptr_t>(BIO_get_data(bio))), p, std::size_t(n), MSG_DONTWAIT);
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_read(bio);
      return int(r);
    });
    BIO_meth_set_ctrl(b, [](BIO*, int cmd, long, void*) -> long { return cmd == BIO_CTRL_FLUSH ? 1 : 0; });
    BIO_meth_set_create(b, [](BIO* bio) -> int {
      BIO_set_init(bio, 1);
      return 1;
    });
    return b;
  }();
  return m;
}

/// One end of a TLS-protected ring connection on a connected socket.
class tls_link {
 public:
  /// `server`: the accepting side. `key`: this connection's pre-shared key.
  tls_link(SSL_CTX* ctx, int fd, bool server, const proof& key) : key_(key) {
    ssl_ = SSL_new(ctx);
    BIO* bio = BIO_new(socket_bio_method());
    if (!ssl_ || !bio) {
      BIO_free(bio);
      SSL_free(ssl_);
      throw comm_error("ring_tcp: cannot set up TLS: " + tls_error_text());
    }
    BIO_set_data(bio, reinterpret_cast<void*>(std::intptr_t(fd)));
    SSL_set_bio(ssl_, bio, bio);
    SSL_set_app_data(ssl_, this);
    if (server) {
      SSL_set_accept_state(ssl_);
      SSL_set_psk_find_session_callback(ssl_, &find_session);
    } else {
      SSL_set_connect_state(ssl_);
      SSL_set_psk_use_session_callback(ssl_, &use_session);
    }
  }
  tls_link(const tls_link&) = delete;
  tls_link& operator=(const tls_link&) = delete;
  ~tls_link() { SSL_free(ssl_); }

  /// Advances the handshake: true when it is complete; otherwise `events` says what to poll for.
  /// A failure throws comm_error.
  bool handshake(short& events) {
    ERR_clear_error();
    const int r = SSL_do_handshake(ssl_);
    if (r == 1) return true;
    std::error_code ec;
    if (!would_block(r, events, ec)) throw comm_error("TLS handshake failed: " + describe(ec));
    return false;
  }
  /// Writes from p: bytes written (> 0), or 0 when it would block (`events` says what to poll for),
  /// or -1 with `ec` set (empty for a TLS failure: `describe` tells it).
  long write(const void* p, std::size_t n, short& events, std::error_code& ec) {
    ERR_clear_error();
    std::size_t done = 0;
    const int r = SSL_write_ex(ssl_, p, n, &done);
    if (r == 1) return long(done);
    return would_block(r, events, ec) ? 0 : -1;
  }
  /// Reads into p: bytes read (> 0), 0 when it would block, -1 with `ec` set (eof when the peer closed).
  long read(void* p, std::size_t n, short& events, std::error_code& ec) {
    ERR_clear_error();
    std::size_t done = 0;
    const int r = SSL_read_ex(ssl_, p, n, &done);
    if (r == 1) return long(done);
    return would_block(r, events, ec) ? 0 : -1;
  }
  /// What a failure was, for messages.
  std::string describe(const std::error_code& ec) const { return ec ? ec.message() : failure_; }

 private:
  bool would_block(int r, short& events, std::error_code& ec) {
    switch (SSL_get_error(ssl_, r)) {
      case SSL_ERROR_WANT_READ: events = POLLIN; return true;
      case SSL_ERROR_WANT_WRITE: events = POLLOUT; return true;
      case SSL_ERROR_ZERO_RETURN: ec = std::make_error_code(std::errc::connection_reset); break;
      case SSL_ERROR_SYSCALL:
        ec = errno ? std::error_code(errno, std::system_category()) : std::make_error_code(std::errc::connection_reset);
        break;
      default:  // a record that fails authentication, a protocol violation
        failure_ = "TLS: " + tls_error_text();
        ec = {};
        break;
    }
    return false;
  }
  static SSL_SESSION* session(SSL* ssl, const proof& key) {
    static constexpr unsigned char aes128gcm_sha256[] = {0x13, 0x01};
    const SSL_CIPHER* cipher = SSL_CIPHER_find(ssl, aes128gcm_sha256);
    SSL_SESSION* s = cipher ? SSL_SESSION_new() : nullptr;
    if (s && (!SSL_SESSION_set1_master_key(s, key.data(), key.size()) || !SSL_SESSION_set_cipher(s, cipher) ||
              !SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION))) {
      SSL_SESSION_free(s);
      s = nullptr;
    }
    return s;
  }
  static int use_session(SSL* ssl, const EVP_MD* md, const unsigned char** id, std::size_t* idlen, SSL_SESSION** out) {
    auto* self = static_cast<tls_link*>(SSL_get_app_data(ssl));
    SSL_SESSION* s = session(ssl, self->key_);
    if (!s) return 0;
    if (md && SSL_CIPHER_get_handshake_digest(SSL_SESSION_get0_cipher(s)) != md) {
      SSL_SESSION_free(s);
      *out = nullptr, *id = nullptr, *idlen = 0;
      return 1;
    }
    *out = s, *id = reinterpret_cast<const unsigned char*>(tls_identity), *idlen = sizeof tls_identity - 1;
    return 1;
  }
  static int find_session(SSL* ssl, const unsigned char* id, std::size_t idlen, SSL_SESSION** out) {
    *out = nullptr;
    if (idlen != sizeof tls_identity - 1 || std::memcmp(id, tls_identity, idlen) != 0) return 1;
    auto* self = static_cast<tls_link*>(SSL_get_app_data(ssl));
    *out = session(ssl, self->key_);
    return *out ? 1 : 0;
  }

  SSL* ssl_ = nullptr;
  proof key_;
  std::string failure_;  // the last failure that is not a socket error
};

/// The TLS context of one communicator: TLS 1.3 only, AES-128-GCM, external PSK, no session tickets.
class tls_context {
 public:
  tls_context() : ctx_(SSL_CTX_new(TLS_method())) {
    if (!ctx_ || !SSL_CTX_set_min_proto_version(ctx_, TLS1_3_VERSION) ||
        !SSL_CTX_set_max_proto_version(ctx_, TLS1_3_VERSION) ||
        !SSL_CTX_set_ciphersuites(ctx_, "TLS_AES_128_GCM_SHA256")) {
      SSL_CTX_free(ctx_);
      throw comm_error("ring_tcp: cannot set up TLS: " + tls_error_text());
    }
    SSL_CTX_set_num_tickets(ctx_, 0);
    // read whole socket buffers at once, not a record header and then its body: half the recv calls
    SSL_CTX_set_read_ahead(ctx_, 1);
    SSL_CTX_set_default_read_buffer_len(ctx_, std::size_t{1} << 18);
    SSL_CTX_set_mode(ctx_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  }
  tls_context(const tls_context&) = delete;
  tls_context& operator=(const tls_context&) = delete;
  ~tls_context() { SSL_CTX_free(ctx_); }
  SSL_CTX* get() const { return ctx_; }

 private:
  SSL_CTX* ctx_;
};

}  // namespace dtrain::comm::detail
