-- CreateTable
CREATE TABLE "WorkspaceInbox" (
    "workspace" TEXT NOT NULL,
    "host" TEXT NOT NULL,
    "port" INTEGER NOT NULL,
    "tls" TEXT NOT NULL,
    "user" TEXT NOT NULL,
    "passwordRef" TEXT NOT NULL,
    "folder" TEXT NOT NULL DEFAULT 'INBOX',
    "uidValidity" BIGINT,
    "lastUid" BIGINT NOT NULL DEFAULT 0,
    "lastError" TEXT,
    "lastErrorAt" TIMESTAMP(3),
    "lastSuccessAt" TIMESTAMP(3),
    "createdBy" TEXT,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "WorkspaceInbox_pkey" PRIMARY KEY ("workspace")
);

-- CreateTable
CREATE TABLE "InboxMessage" (
    "id" SERIAL NOT NULL,
    "workspace" TEXT NOT NULL,
    "uidValidity" BIGINT NOT NULL,
    "uid" BIGINT NOT NULL,
    "messageKey" TEXT NOT NULL,
    "status" TEXT NOT NULL,
    "path" TEXT,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "InboxMessage_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE UNIQUE INDEX "InboxMessage_workspace_uidValidity_uid_key" ON "InboxMessage"("workspace", "uidValidity", "uid");

-- CreateIndex
CREATE UNIQUE INDEX "InboxMessage_workspace_messageKey_key" ON "InboxMessage"("workspace", "messageKey");

-- AddForeignKey
ALTER TABLE "WorkspaceInbox" ADD CONSTRAINT "WorkspaceInbox_workspace_fkey" FOREIGN KEY ("workspace") REFERENCES "Workspace"("name") ON DELETE CASCADE ON UPDATE CASCADE;
