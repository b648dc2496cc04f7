chown "$OWNER" /model-cache && echo "node cache owned by $OWNER"
