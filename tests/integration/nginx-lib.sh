# shellcheck shell=bash
# shellcheck disable=SC2034  # HTTPS_PORT, HTTP_PORT and NGINX_LOG are for the tests that source this
# Sourced by integration tests after lib.sh: a real nginx (Debian's) on 127.0.0.1, serving
# $TMP/www over HTTPS with a certificate from the test CA, and over plain HTTP.
# start_nginx sets HTTPS_PORT, HTTP_PORT and NGINX_LOG (the access log: one line per request,
# "METHOD URI STATUS BYTES RANGE").

NGINX_PID=

# server_cert DIR: a certificate for 127.0.0.1/localhost signed by the test CA in DIR.
server_cert() {
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=127.0.0.1 \
        -keyout "$1/server.key" -out "$1/server.csr" 2> /dev/null &&
        openssl x509 -req -in "$1/server.csr" -CA "$1/ca.pem" -CAkey "$1/ca.key" -CAcreateserial -days 30 \
            -extfile <(printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n') \
            -out "$1/server.crt" 2> /dev/null
}

# start_nginx [EXTRA-SERVER-DIRECTIVES]: nginx in the background; no "listen ...:0" in nginx
# 1.22, so ports are picked at random and retried.
start_nginx() {
    command -v nginx > /dev/null || { echo "nginx is not installed (make deps installs nginx-light)"; return 1; }
    mkdir -p "$TMP/www" "$TMP/nginx"
    server_cert "$TMP/pki" || { echo "cannot make the server certificate"; return 1; }
    NGINX_LOG="$TMP/nginx/access.log"
    for _ in 1 2 3 4 5 6 7 8; do
        HTTPS_PORT=$((20000 + RANDOM % 20000))
        HTTP_PORT=$((HTTPS_PORT + 1))
        cat > "$TMP/nginx/nginx.conf" <<EOC
user root;
worker_processes 1;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/error.log;
events { worker_connections 64; }
http {
    access_log $TMP/nginx/access.log;
    log_format plain '\$request_method \$uri \$status \$bytes_sent \$http_range';
    client_body_temp_path $TMP/nginx/body;
    proxy_temp_path $TMP/nginx/proxy;
    fastcgi_temp_path $TMP/nginx/fastcgi;
    uwsgi_temp_path $TMP/nginx/uwsgi;
    scgi_temp_path $TMP/nginx/scgi;
    types { application/octet-stream channel tpb; }
    server {
        listen 127.0.0.1:$HTTPS_PORT ssl;
        listen 127.0.0.1:$HTTP_PORT;
        ssl_certificate $TMP/pki/server.crt;
        ssl_certificate_key $TMP/pki/server.key;
        access_log $TMP/nginx/access.log plain;
        root $TMP/www;
        location = /to-http.channel { return 302 http://127.0.0.1:$HTTP_PORT/stable.channel; }
        ${1:-}
    }
}
EOC
        nginx -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" 2> "$TMP/nginx/start.err" &&
            NGINX_PID=$(cat "$TMP/nginx/nginx.pid") && return 0
        grep -q "Address already in use" "$TMP/nginx/start.err" || break
    done
    echo "nginx did not start: $(tail -n 2 "$TMP/nginx/start.err")"
    return 1
}

stop_nginx() {
    [ -n "$NGINX_PID" ] || return 0
    kill -QUIT "$NGINX_PID" 2> /dev/null
    for _ in $(seq 50); do kill -0 "$NGINX_PID" 2> /dev/null || break; sleep 0.1; done
    NGINX_PID=
}
