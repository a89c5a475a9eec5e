-- CreateTable
CREATE TABLE "WorkspaceInbox" (
    "workspace" TEXT NOT NULL PRIMARY KEY,
    "host" TEXT NOT NULL,
    "port" INTEGER NOT NULL,
    "tls" TEXT NOT NULL,
    "user" TEXT NOT NULL,
    "passwordRef" TEXT NOT NULL,
    "folder" TEXT NOT NULL DEFAULT 'INBOX',
    "uidValidity" BIGINT,
    "lastUid" BIGINT NOT NULL DEFAULT 0,
    "lastError" TEXT,
    "lastErrorAt" DATETIME,
    "lastSuccessAt" DATETIME,
    "createdBy" TEXT,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" DATETIME NOT NULL,
    CONSTRAINT "WorkspaceInbox_workspace_fkey" FOREIGN KEY ("workspace") REFERENCES "Workspace" ("name") ON DELETE CASCADE ON UPDATE CASCADE
);

-- CreateTable
CREATE TABLE "InboxMessage" (
    "id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    "workspace" TEXT NOT NULL,
    "uidValidity" BIGINT NOT NULL,
    "uid" BIGINT NOT NULL,
    "messageKey" TEXT NOT NULL,
    "status" TEXT NOT NULL,
    "path" TEXT,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP
);

-- CreateIndex
CREATE UNIQUE INDEX "InboxMessage_workspace_uidValidity_uid_key" ON "InboxMessage"("workspace", "uidValidity", "uid");

-- CreateIndex
CREATE UNIQUE INDEX "InboxMessage_workspace_messageKey_key" ON "InboxMessage"("workspace", "messageKey");
