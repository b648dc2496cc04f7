if [ -f "$CACHE/.dsv4-cache-complete" ]; then echo "node cache ready"; else mkdir -p "$CACHE" && cp -a "$SRC/." "$CACHE/" && touch "$CACHE/.dsv4-cache-complete" && echo "node cache filled"; fi
